//! Writes a release tarball from jobs and packages given as files, as `bosh
//! create-release --tarball` would: each job and package archived, fingerprinted by its
//! contents, and listed with its digest in `release.MF`. The fleet's demo release is kept
//! as source and built with it; tests build the releases they upload with it.

use super::digest::sha1_hex;
use super::fingerprint::{Fingerprinted, fingerprint};
use super::tgz;

/// One file of a job or package, by its path inside that archive.
pub type File = (String, Vec<u8>);

/// One file of a job or package as a release source holds it: its path inside the
/// archive, its contents and its Unix mode (which the archive keeps and the fingerprint
/// counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub path: String,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl SourceFile {
    fn plain((path, bytes): File) -> Self {
        SourceFile {
            path,
            bytes,
            mode: 0o644,
        }
    }
}

#[derive(Debug, Clone)]
struct Part {
    name: String,
    dependencies: Vec<String>,
    files: Vec<SourceFile>,
    /// A package's `packaging` counts in its fingerprint without its mode.
    package: bool,
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
                files: files.into_iter().map(SourceFile::plain).collect(),
                package: true,
            },
            stemcell.to_string(),
        ));
        self
    }

    /// A job: `job.MF` (its spec), `monit`, and `templates/...`, every file `0644`.
    pub fn job(self, name: &str, files: Vec<File>) -> Self {
        self.job_source(name, files.into_iter().map(SourceFile::plain).collect())
    }

    /// A job whose files keep their modes.
    pub fn job_source(mut self, name: &str, files: Vec<SourceFile>) -> Self {
        self.jobs.push(Part {
            name: name.to_string(),
            dependencies: Vec::new(),
            files,
            package: false,
        });
        self
    }

    /// A package: `packaging` and the sources it builds from, every file `0644`.
    pub fn package(self, name: &str, dependencies: &[&str], files: Vec<File>) -> Self {
        let files = files.into_iter().map(SourceFile::plain).collect();
        self.package_source(name, dependencies, files)
    }

    /// A package whose files keep their modes.
    pub fn package_source(
        mut self,
        name: &str,
        dependencies: &[&str],
        files: Vec<SourceFile>,
    ) -> Self {
        self.packages.push(Part {
            name: name.to_string(),
            dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
            files,
            package: true,
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

/// The part's archive and its fingerprint, as the `bosh` CLI computes it (see
/// [`fingerprint`]), so that the same sources give the same fingerprint whichever tool
/// built them.
fn archive(part: &Part) -> (String, Vec<u8>) {
    let mut files: Vec<&SourceFile> = part.files.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let counted: Vec<Fingerprinted<'_>> = files
        .iter()
        .map(|f| Fingerprinted {
            path: &f.path,
            bytes: &f.bytes,
            mode: (!(part.package && f.path == "packaging")).then_some(f.mode),
        })
        .collect();
    let fingerprint = fingerprint(&counted, &part.dependencies);
    let entries: Vec<(&str, &[u8], u32)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.bytes.as_slice(), f.mode))
        .collect();
    (fingerprint, tgz::build_with_modes(&entries))
}
