//! The book (`docs/`, an mdBook) and the README: the book builds, every
//! internal link of its pages and of the README resolves, and the shell
//! blocks marked `<!-- run -->` run. How to mark one:
//! `docs/contributing.md`, "Runnable snippets".

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use mdbook_driver::MDBook;
use mdbook_driver::book::BookItem;

use crate::common::{self, Env};

/// How pages link to a file of the repository outside `docs/`.
const REPO_FILE_URLS: [&str; 3] = [
    "https://github.com/sandgraph/sandgraph/blob/main/",
    "https://github.com/sandgraph/sandgraph/tree/main/",
    "https://raw.githubusercontent.com/sandgraph/sandgraph/main/",
];

/// The marker of a runnable block: alone on the line before its fence.
const RUN_MARKER: &str = "<!-- run -->";

/// The largest page or README read (the book's pages are a few tens of KB).
const MAX_PAGE_BYTES: u64 = 1 << 20;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `path`'s text, bounded by [`MAX_PAGE_BYTES`].
fn read_page(path: &Path) -> String {
    let len = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .len();
    assert!(
        len <= MAX_PAGE_BYTES,
        "{} is {len} bytes, over the {MAX_PAGE_BYTES} a page may have",
        path.display()
    );
    std::fs::read_to_string(path).unwrap()
}

/// `path` with `.` and `..` resolved lexically; `None` when it climbs
/// above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// The values of every `attr="..."` in `html`.
fn attributes<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    html.match_indices(&needle)
        .filter_map(|(i, _)| {
            let rest = &html[i + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// The built book: each page's path under `docs/` (`hosting.md`) with its
/// HTML, and the ids every HTML file of the output defines.
struct Built {
    pages: Vec<(PathBuf, String)>,
    ids: BTreeMap<PathBuf, BTreeSet<String>>,
}

/// Builds the book into `out` with the mdbook library.
fn build_book(out: &Path) -> Built {
    let mut book = MDBook::load(repo().join("docs"))
        .unwrap_or_else(|e| panic!("docs/ does not load as an mdBook: {e:#}"));
    book.config.build.build_dir = out.to_path_buf();
    book.build()
        .unwrap_or_else(|e| panic!("the book in docs/ does not build: {e:#}"));
    let mut pages = Vec::new();
    for item in book.iter() {
        if let BookItem::Chapter(ch) = item
            && let Some(path) = &ch.path
        {
            let html = read_page(&out.join(path.with_extension("html")));
            pages.push((path.clone(), html));
        }
    }
    let mut ids = BTreeMap::new();
    for (path, html) in &pages {
        let set = attributes(html, "id")
            .into_iter()
            .map(str::to_owned)
            .collect();
        ids.insert(path.with_extension("html"), set);
    }
    Built { pages, ids }
}

/// The part of a page's HTML its markdown made (not the theme's chrome).
fn content(html: &str) -> &str {
    let start = html.find("<main>").unwrap_or(0);
    let end = html[start..]
        .find("</main>")
        .map_or(html.len(), |e| start + e);
    &html[start..end]
}

/// Why a link to a repository file does not resolve, if it does not.
fn check_repo_url(url: &str) -> Option<Result<(), String>> {
    let rest = REPO_FILE_URLS
        .iter()
        .find_map(|prefix| url.strip_prefix(prefix))?;
    let file = rest.split('#').next().unwrap_or(rest);
    Some(if repo().join(file).exists() {
        Ok(())
    } else {
        Err(format!("the repository has no {file}"))
    })
}

/// Why the link `href` of the built page `page` (a path of the output,
/// e.g. `reference/cli.html`) is broken, if it is.
fn check_book_link(built: &Built, page: &Path, href: &str) -> Result<(), String> {
    let href = href.replace("&amp;", "&");
    if let Some(result) = check_repo_url(&href) {
        return result;
    }
    if href.contains("://") || href.starts_with("mailto:") {
        return Ok(());
    }
    let (file, anchor) = match href.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (href.as_str(), None),
    };
    let target = if file.is_empty() {
        page.to_path_buf()
    } else {
        let joined = page.parent().unwrap_or(Path::new("")).join(file);
        normalize(&joined).ok_or_else(|| {
            "it leaves the book: link a file of the repository as \
             https://github.com/sandgraph/sandgraph/blob/main/PATH"
                .to_owned()
        })?
    };
    let Some(ids) = built.ids.get(&target) else {
        return Err(format!(
            "no page {} in the book (is it in SUMMARY.md?)",
            target.with_extension("md").display()
        ));
    };
    match anchor {
        Some(a) if !a.is_empty() && !ids.contains(a) => Err(format!(
            "{} has no heading with the anchor #{a}",
            target.with_extension("md").display()
        )),
        _ => Ok(()),
    }
}

/// The markdown links `[text](target)` and images of `text` outside code,
/// with their line numbers.
fn markdown_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans may hold "](": drop them first.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            links.push((n + 1, rest[..end].trim().to_owned()));
            rest = &rest[end..];
        }
    }
    links
}

/// Why the README's link `target` is broken, if it is; pages of the book
/// are checked against the built book's anchors.
fn check_readme_link(built: &Built, target: &str) -> Result<(), String> {
    if let Some(result) = check_repo_url(target) {
        return result;
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    if file.is_empty() {
        return Err("the README has no anchors to link within it".to_owned());
    }
    let path = normalize(Path::new(file)).ok_or("it leaves the repository")?;
    if !repo().join(&path).exists() {
        return Err(format!("the repository has no {file}"));
    }
    if let Ok(in_book) = path.strip_prefix("docs")
        && in_book.extension().is_some_and(|e| e == "md")
    {
        let html = in_book.with_extension("html");
        let ids = built
            .ids
            .get(&html)
            .ok_or_else(|| format!("{file} is not a page of the book (SUMMARY.md)"))?;
        if !anchor.is_empty() && !ids.contains(anchor) {
            return Err(format!("{file} has no heading with the anchor #{anchor}"));
        }
    }
    Ok(())
}

#[test]
fn book_builds_and_every_internal_link_resolves() {
    let out = tempfile::tempdir().unwrap();
    let built = build_book(out.path());
    assert!(
        built.pages.len() >= 10,
        "the book has {} pages; SUMMARY.md lists its chapters",
        built.pages.len()
    );
    let mut broken = Vec::new();
    for (page, html) in &built.pages {
        let body = content(html);
        let html_path = page.with_extension("html");
        for href in attributes(body, "href")
            .into_iter()
            .chain(attributes(body, "src"))
        {
            if let Err(why) = check_book_link(&built, &html_path, href) {
                broken.push(format!(
                    "docs/{}: link {}: {why}",
                    page.display(),
                    href.replace(".html", ".md")
                ));
            }
        }
    }
    let readme = read_page(&repo().join("README.md"));
    for (line, target) in markdown_links(&readme) {
        if let Err(why) = check_readme_link(&built, &target) {
            broken.push(format!("README.md:{line}: link {target}: {why}"));
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_broken_link_is_named() {
    let out = tempfile::tempdir().unwrap();
    let built = build_book(out.path());
    let page = Path::new("hosting.html");
    assert!(check_book_link(&built, page, "capabilities.html").is_ok());
    assert!(check_book_link(&built, page, "#sandbox-limits").is_ok());
    let missing = check_book_link(&built, page, "no-such-page.html").unwrap_err();
    assert!(missing.contains("no page no-such-page.md"), "{missing}");
    let anchor = check_book_link(&built, page, "capabilities.html#no-such-heading").unwrap_err();
    assert!(anchor.contains("#no-such-heading"), "{anchor}");
    let out_of_book = check_book_link(&built, page, "../../README.html").unwrap_err();
    assert!(out_of_book.contains("leaves the book"), "{out_of_book}");
    let file = check_book_link(
        &built,
        page,
        "https://github.com/sandgraph/sandgraph/blob/main/no/such.rs",
    )
    .unwrap_err();
    assert!(file.contains("no/such.rs"), "{file}");
    assert!(check_readme_link(&built, "docs/hosting.md#no-such-heading").is_err());
    assert!(check_readme_link(&built, "docs/hosting.md#sandbox-limits").is_ok());
}

/// A block marked to run: its file, the line of its fence and its script.
struct Snippet {
    file: String,
    line: usize,
    script: String,
}

/// The runnable blocks of `text` (the file `file`).
fn snippets(file: &str, text: &str) -> Vec<Snippet> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == RUN_MARKER {
            let fence = lines.get(i + 1).map_or("", |l| l.trim());
            assert!(
                fence == "```sh" || fence == "```bash",
                "{file}:{}: {RUN_MARKER} must be followed by a ```sh block",
                i + 1
            );
            let body: Vec<&str> = lines[i + 2..]
                .iter()
                .take_while(|l| l.trim() != "```")
                .copied()
                .collect();
            found.push(Snippet {
                file: file.to_owned(),
                line: i + 2,
                script: body.join("\n"),
            });
            i += body.len() + 2;
        }
        i += 1;
    }
    found
}

/// The README and every page of the book, as (name, text).
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_owned(), read_page(&repo().join("README.md")))];
    for dir in ["docs", "docs/reference"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        names.sort();
        for path in names {
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            docs.push((name, read_page(&path)));
        }
    }
    docs
}

#[test]
fn snippets_marked_to_run_run() {
    let all: Vec<Snippet> = documents()
        .iter()
        .flat_map(|(name, text)| snippets(name, text))
        .collect();
    assert!(
        all.iter().any(|s| s.file == "README.md"),
        "the README has no block marked {RUN_MARKER}"
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_sandgraph"));
    let path = std::env::join_paths(std::iter::once(bin.parent().unwrap().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let mut failed = Vec::new();
    for snippet in &all {
        let env = Env::new(&[
            ("echo_graph.wasm", sandgraph_tests::ECHO),
            ("greet_graph.wasm", sandgraph_tests::GREET),
        ]);
        sandgraph_tests::copy_graphs(
            env.dir.path(),
            &[
                ("echo.wasm", sandgraph_tests::ECHO),
                ("greet.wasm", sandgraph_tests::GREET),
            ],
        );
        // The variables `sandgraph` gets in the other tests (its cache, no
        // model key), on a bash that finds this build of it first.
        let mut bash = std::process::Command::new("bash");
        bash.args(["-euo", "pipefail", "-c", &snippet.script])
            .current_dir(env.dir.path());
        for (key, value) in env.command(&[]).get_envs() {
            match value {
                Some(v) => bash.env(key, v),
                None => bash.env_remove(key),
            };
        }
        let out = bash.env("PATH", &path).output().expect("bash runs");
        if !out.status.success() {
            failed.push(format!(
                "{}:{}: the block exited with {}:\n{}",
                snippet.file,
                snippet.line,
                out.status,
                common::stderr(&out)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn a_marked_block_is_found_with_its_line() {
    let text = "intro\n<!-- run -->\n```sh\nsandgraph --version\n```\n```sh\nnot marked\n```\n";
    let found = snippets("x.md", text);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].line, 3);
    assert_eq!(found[0].script, "sandgraph --version");
}
