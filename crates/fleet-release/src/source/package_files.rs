//! Which files a package of a release source holds, by BOSH's rules: each glob of its
//! spec's `files:` matched against the release's `src/`, then its `blobs/` (a path found
//! in `src/` wins), every glob matching at least one file; then `excluded_files:` taken
//! out. `*` stays within a directory, `**` crosses them, as the CLI's globs do. Pure: the
//! listings in, the choice or every problem out.

use globset::{Glob, GlobBuilder, GlobMatcher};

use super::disk::Found;

/// Where a package file comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Root {
    Src,
    Blobs,
}

impl Root {
    pub fn dir(self) -> &'static str {
        match self {
            Root::Src => "src",
            Root::Blobs => "blobs",
        }
    }
}

/// A package's spec as a release source gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct PackageSpec {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub dependencies: Vec<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub excluded_files: Vec<String>,
}

/// The files `spec` selects from `src` and `blobs`, each with where it comes from, in
/// path order.
///
/// # Errors
/// Every problem: a glob that is not one, a glob that matches nothing, a link selected,
/// `packaging` selected as a file.
pub(crate) fn select(
    spec: &PackageSpec,
    src: &[Found],
    blobs: &[Found],
) -> Result<Vec<(Root, String)>, Vec<String>> {
    let mut problems = Vec::new();
    let mut chosen: std::collections::BTreeMap<String, (Root, bool)> = Default::default();
    for pattern in &spec.files {
        let Some(matcher) = matcher(pattern, "files", &mut problems) else {
            continue;
        };
        let mut matched = false;
        for (root, listing) in [(Root::Src, src), (Root::Blobs, blobs)] {
            for file in listing.iter().filter(|f| matcher.is_match(&f.relative)) {
                matched = true;
                chosen
                    .entry(file.relative.clone())
                    .or_insert((root, file.link));
            }
        }
        if !matched {
            problems.push(format!(
                "files: no file in src/ or blobs/ matches `{pattern}`"
            ));
        }
    }
    for pattern in &spec.excluded_files {
        if let Some(matcher) = matcher(pattern, "excluded_files", &mut problems) {
            chosen.retain(|path, _| !matcher.is_match(path));
        }
    }
    for special in ["packaging", "pre_packaging"] {
        if chosen.contains_key(special) {
            problems.push(format!(
                "files: `{special}` is the package's own file and cannot be listed in `files:`"
            ));
        }
    }
    for (path, (root, link)) in &chosen {
        if *link {
            problems.push(format!(
                "files: {}/{path} is a symbolic link, which packages here cannot hold",
                root.dir()
            ));
        }
    }
    if problems.is_empty() {
        Ok(chosen
            .into_iter()
            .map(|(path, (root, _))| (root, path))
            .collect())
    } else {
        Err(problems)
    }
}

fn matcher(pattern: &str, key: &str, problems: &mut Vec<String>) -> Option<GlobMatcher> {
    match GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g: Glob| g.compile_matcher())
    {
        Ok(m) => Some(m),
        Err(e) => {
            problems.push(format!("{key}: `{pattern}` is not a glob: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(paths: &[&str]) -> Vec<Found> {
        paths
            .iter()
            .map(|p| Found {
                relative: p.to_string(),
                link: p.ends_with(".link"),
            })
            .collect()
    }

    fn spec(files: &[&str], excluded: &[&str]) -> PackageSpec {
        PackageSpec {
            name: "p".into(),
            files: files.iter().map(|s| s.to_string()).collect(),
            excluded_files: excluded.iter().map(|s| s.to_string()).collect(),
            ..PackageSpec::default()
        }
    }

    #[test]
    fn stars_stay_in_a_directory_and_double_stars_cross_them() {
        let src = found(&["app/main.c", "app/lib/util.c", "app/README", "other/x.c"]);
        let picked = select(&spec(&["app/*.c"], &[]), &src, &[]).unwrap();
        assert_eq!(picked, [(Root::Src, "app/main.c".to_string())]);
        let picked = select(&spec(&["app/**/*"], &["app/README"]), &src, &[]).unwrap();
        let paths: Vec<&str> = picked.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(paths, ["app/lib/util.c", "app/main.c"]);
    }

    #[test]
    fn a_path_in_src_wins_over_the_same_in_blobs() {
        let src = found(&["go/go.tgz"]);
        let blobs = found(&["go/go.tgz", "go/extra.tgz"]);
        let picked = select(&spec(&["go/*"], &[]), &src, &blobs).unwrap();
        assert_eq!(
            picked,
            [
                (Root::Blobs, "go/extra.tgz".to_string()),
                (Root::Src, "go/go.tgz".to_string())
            ]
        );
    }

    #[test]
    fn every_problem_is_named() {
        let src = found(&["a/x.link", "packaging"]);
        let problems = select(
            &spec(&["missing/*", "a/*", "packaging", "[bad"], &[]),
            &src,
            &[],
        )
        .unwrap_err();
        let all = problems.join("\n");
        assert!(all.contains("matches `missing/*`"), "{all}");
        assert!(all.contains("src/a/x.link is a symbolic link"), "{all}");
        assert!(
            all.contains("`packaging` is the package's own file"),
            "{all}"
        );
        assert!(all.contains("`[bad` is not a glob"), "{all}");
    }
}
