//! `docs/reference/cli.md`: every subcommand of `sandgraph`, its about and
//! its options, from the clap definitions in `main.rs`.

use std::fmt::Write;

use clap::{Arg, Command, CommandFactory};

use super::{code, md};

/// The page.
pub(super) fn page() -> String {
    let mut root = crate::Cli::command();
    root.build();
    let mut out = String::from("# Command line\n\n");
    if let Some(about) = root.get_about() {
        let _ = writeln!(out, "{}\n", md(&about.to_string()));
    }
    out.push_str(
        "Every command of `sandgraph`, with its options. `sandgraph help COMMAND` \
         and `sandgraph COMMAND --help` print the same. Failures print \
         `error[<code>]: <message>` on stderr and exit with the code's number: \
         [Exit codes](exit-codes.md).\n\n",
    );
    out.push_str("| command | what it does |\n|---|---|\n");
    let mut commands = Vec::new();
    collect(&root, "sandgraph", &mut commands);
    for (path, cmd) in &commands {
        let _ = writeln!(
            out,
            "| [{}](#{}) | {} |",
            code(path),
            path.replace(' ', "-"),
            md(&first_line(cmd))
        );
    }
    for (path, cmd) in &commands {
        section(&mut out, path, cmd);
    }
    out
}

/// Every runnable subcommand, depth first, with its full name; `help` and
/// hidden commands left out.
fn collect<'a>(cmd: &'a Command, path: &str, out: &mut Vec<(String, &'a Command)>) {
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" || sub.is_hide_set() {
            continue;
        }
        let name = format!("{path} {}", sub.get_name());
        if sub.has_subcommands() {
            collect(sub, &name, out);
        } else {
            out.push((name, sub));
        }
    }
}

/// The first line of a command's about.
fn first_line(cmd: &Command) -> String {
    cmd.get_about()
        .map(|a| a.to_string())
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// One command's heading, about, usage and options.
fn section(out: &mut String, path: &str, cmd: &Command) {
    let _ = writeln!(out, "\n## {path}\n");
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    for paragraph in about.split("\n\n") {
        let _ = writeln!(out, "{}\n", md(&paragraph.replace('\n', " ")));
    }
    // Clap spells the command as it was built (`sandgraph threads list` or
    // `list`); the page spells it in full.
    let usage = cmd.clone().render_usage().to_string();
    let name = cmd.get_name();
    let rest = usage
        .split_once(&format!("{name} "))
        .map_or(String::new(), |(_, rest)| format!(" {rest}"));
    let _ = writeln!(out, "```text\n{path}{rest}\n```\n");
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if args.is_empty() {
        return;
    }
    out.push_str("| argument | meaning |\n|---|---|\n");
    for arg in args {
        let _ = writeln!(out, "| {} | {} |", code(&spelling(arg)), meaning(arg));
    }
}

/// How an argument is written: `<NAME>` for a positional one, else its
/// flags and value names.
fn spelling(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect())
        .unwrap_or_else(|| vec![format!("<{}>", arg.get_id().as_str().to_uppercase())]);
    if arg.is_positional() {
        return values.join(" ");
    }
    let mut flags = Vec::new();
    if let Some(s) = arg.get_short() {
        flags.push(format!("-{s}"));
    }
    if let Some(l) = arg.get_long() {
        flags.push(format!("--{l}"));
    }
    let flags = flags.join(", ");
    if arg.get_action().takes_values() {
        format!("{flags} {}", values.join(" "))
    } else {
        flags
    }
}

/// An argument's help, with its possible values, default and whether it is
/// required.
fn meaning(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
        .replace('\n', " ");
    let mut text = md(help.trim());
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !possible.is_empty() && arg.get_action().takes_values() {
        let _ = write!(text, " One of {}.", possible.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && arg.get_action().takes_values() {
        let _ = write!(text, " Default: {}.", code(&defaults.join(",")));
    }
    if arg.is_required_set() {
        text.push_str(" Required.");
    }
    text
}
