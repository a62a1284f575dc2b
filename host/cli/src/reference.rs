//! `sandgraph completions SHELL` and `sandgraph man --out DIR`: the shell
//! completion script and the man pages, generated from the clap definition
//! the command line is parsed with, so neither can fall behind it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use sandgraph_runtime::{ErrorCode, RunError};

use crate::exit::Failure;
use crate::show;

/// `sandgraph completions`
#[derive(clap::Args)]
#[command(after_long_help = COMPLETIONS_HELP)]
pub struct CompletionsArgs {
    /// The shell the script is for
    shell: clap_complete::Shell,
}

/// Where each shell's script goes, for `completions --help`.
const COMPLETIONS_HELP: &str = "\
Install: bash: sandgraph completions bash > ~/.local/share/bash-completion/completions/sandgraph
zsh: sandgraph completions zsh > \"${fpath[1]}/_sandgraph\"
fish: sandgraph completions fish > ~/.config/fish/completions/sandgraph.fish";

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> Result<ExitCode, Failure> {
    let mut cmd = crate::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "sandgraph", &mut script);
    let script = String::from_utf8(script).map_err(|e| {
        Failure::internal(format!(
            "the {} completion script is not UTF-8: {e}",
            args.shell
        ))
    })?;
    outln!("{}", script.trim_end_matches('\n'));
    Ok(ExitCode::SUCCESS)
}

/// `sandgraph man`
#[derive(clap::Args)]
pub struct ManArgs {
    /// The folder to write the pages to (made when missing): sandgraph.1, and sandgraph-COMMAND.1 for each command
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Writes one man page (section 1) for `sandgraph` and one for each of its
/// commands, nested ones included (`sandgraph-threads-list.1`).
pub fn man(args: ManArgs) -> Result<ExitCode, Failure> {
    let shown = |p: &Path| show::line(&p.display().to_string(), show::MAX_LINE_BYTES);
    std::fs::create_dir_all(&args.out).map_err(|e| {
        RunError::new(
            ErrorCode::InvalidInput,
            format!("cannot create {}: {e}", shown(&args.out)),
        )
    })?;
    // Built, so each command's display name is its page's name
    // (`sandgraph-build`); `help` is a flag on every page, not a page.
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = 0usize;
    let mut pending = vec![cmd];
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        // Each page names the sandgraph it documents (a command's own
        // version would be empty).
        let page = clap_mangen::Man::new(cmd).source(format!(
            "sandgraph {}",
            crate::Cli::command().get_version().unwrap_or_default()
        ));
        page.generate_to(&args.out).map_err(|e| {
            RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "cannot write {}: {e}",
                    shown(&args.out.join(page.get_filename()))
                ),
            )
        })?;
        written += 1;
    }
    outln!("wrote {written} man pages to {}", shown(&args.out));
    Ok(ExitCode::SUCCESS)
}
