//! Writes a release tarball from jobs and packages given as files, as `bosh
//! create-release --tarball` would: each job and package archived, fingerprinted by its
//! contents, and listed with its digest in `release.MF`. The fleet's demo release is kept
//! as source and built with it; tests build the releases they upload with it.

use super::digest::sha1_hex;
use super::tgz;

/// One file of a job or package, by its path inside that archive.
pub type File = (String, Vec<u8>);

#[derive(Debug, Clone)]
struct Part {
    name: String,
    dependencies: Vec<String>,
    files: Vec<File>,
}

#[derive(Debug, Clone)]
pub struct ReleaseBuilder {
    name: String,
    version: String,
    jobs: Vec<Part>,
    packages: Vec<Part>,
    /// Compiled packages, each with the stemcell (`os/version`) it was compiled for.
    compiled: Vec<(Part, String)>,
}

impl ReleaseBuilder {
    pub fn new(name: &str, version: &str) -> Self {
        ReleaseBuilder {
            name: name.to_string(),
            version: version.to_string(),
            jobs: Vec::new(),
            packages: Vec::new(),
            compiled: Vec::new(),
        }
    }

    /// A compiled package, as a compiled release carries it: what its installation left
    /// (`files`), compiled for `stemcell` (`os/version`), with no sources.
    pub fn compiled(
        mut self,
        name: &str,
        dependencies: &[&str],
        stemcell: &str,
        files: Vec<File>,
    ) -> Self {
        self.compiled.push((
            Part {
                name: name.to_string(),
                dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
                files,
            },
            stemcell.to_string(),
        ));
        self
    }

    /// A job: `job.MF` (its spec), `monit`, and `templates/...`.
    pub fn job(mut self, name: &str, files: Vec<File>) -> Self {
        self.jobs.push(Part {
            name: name.to_string(),
            dependencies: Vec::new(),
            files,
        });
        self
    }

    /// A package: `packaging` and the sources it builds from.
    pub fn package(mut self, name: &str, dependencies: &[&str], files: Vec<File>) -> Self {
        self.packages.push(Part {
            name: name.to_string(),
            dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
            files,
        });
        self
    }

    /// The release tarball, gzipped.
    pub fn build(&self) -> Vec<u8> {
        self.build_without(&[])
    }

    /// The tarball without the archives of the packages named, as `bosh upload-release`
    /// sends it when the director already has them.
    pub fn build_without(&self, left_out: &[&str]) -> Vec<u8> {
        let mut manifest = format!("name: {}\nversion: '{}'\n", self.name, self.version);
        manifest.push_str("commit_hash: unknown\nuncommitted_changes: false\njobs:\n");
        let mut archives: Vec<(String, Vec<u8>)> = Vec::new();
        for job in &self.jobs {
            let (fingerprint, bytes) = archive(job);
            manifest.push_str(&entry(&job.name, &fingerprint, &bytes));
            archives.push((format!("jobs/{}.tgz", job.name), bytes));
        }
        manifest.push_str("packages:\n");
        for package in &self.packages {
            let (fingerprint, bytes) = archive(package);
            manifest.push_str(&entry(&package.name, &fingerprint, &bytes));
            manifest.push_str(&format!(
                "  dependencies: [{}]\n",
                package.dependencies.join(", ")
            ));
            if !left_out.contains(&package.name.as_str()) {
                archives.push((format!("packages/{}.tgz", package.name), bytes));
            }
        }
        if !self.compiled.is_empty() {
            manifest.push_str("compiled_packages:\n");
        }
        for (package, stemcell) in &self.compiled {
            let (fingerprint, bytes) = archive(package);
            manifest.push_str(&entry(&package.name, &fingerprint, &bytes));
            manifest.push_str(&format!(
                "  stemcell: {stemcell}\n  dependencies: [{}]\n",
                package.dependencies.join(", ")
            ));
            archives.push((format!("compiled_packages/{}.tgz", package.name), bytes));
        }
        let mut files: Vec<(&str, &[u8])> = vec![("release.MF", manifest.as_bytes())];
        files.extend(archives.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
        tgz::build(&files)
    }
}

fn entry(name: &str, fingerprint: &str, bytes: &[u8]) -> String {
    format!(
        "- name: {name}\n  version: {fingerprint}\n  fingerprint: {fingerprint}\n  sha1: {}\n",
        sha1_hex(bytes)
    )
}

/// The part's archive and its fingerprint: a digest of its files' paths and contents
/// (and its dependencies), so that the same sources give the same fingerprint.
fn archive(part: &Part) -> (String, Vec<u8>) {
    let mut files: Vec<&File> = part.files.iter().collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut listing = String::new();
    for (path, bytes) in &files {
        listing.push_str(&format!("{path}\0{}\n", sha1_hex(bytes)));
    }
    for dep in &part.dependencies {
        listing.push_str(&format!("dependency\0{dep}\n"));
    }
    let fingerprint = sha1_hex(listing.as_bytes());
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    (fingerprint, tgz::build(&refs))
}
