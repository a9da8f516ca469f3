//! Man pages and shell completions generated from a program's clap definitions, so that every
//! flag and its help have one source.
//!
//! Man pages: `NAME.1` for the program and `NAME-SUB.1` for each visible subcommand
//! (recursively). `ebrec man -o docs/man` and `ebsym man -o docs/man` write them; a test
//! regenerates them and fails when `docs/man` differs. clap_mangen renders each page; this
//! crate then gives it a synopsis with value names (clap_mangen writes `[-n ]`), turns the
//! help's Markdown `code` into bold, and moves the examples (a command's `Examples:` after
//! its help, or an `Example: \`CMD\`` paragraph) into an EXAMPLES section, followed by SEE
//! ALSO.
//!
//! Completions: [`write_completions`] and [`print_completions`] (clap_complete) for bash, zsh
//! and fish: `ebrec completions --shell bash`, `ebrec completions -o DIR`.
use std::io;
use std::path::Path;

/// Writes the pages of `cmd` into `dir` (created); returns how many. `others` are the other
/// programs named in SEE ALSO (ebrec's pages name ebsym, and the other way round).
pub fn write_all(cmd: &clap::Command, dir: &Path, others: &[&str]) -> io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.clone().disable_help_subcommand(true);
    cmd.build();
    let mut n = 0;
    let program = cmd.get_name().to_string();
    let source = match cmd.get_version() {
        Some(v) => format!("{program} {v}"),
        None => program.clone(),
    };
    let ctx = Page {
        program: &program,
        source: &source,
        others,
    };
    write_tree(&cmd, dir, &ctx, None, &mut n)?;
    Ok(n)
}

/// What every page of one program shares.
struct Page<'a> {
    program: &'a str,
    /// The footer's source: the program and its version.
    source: &'a str,
    others: &'a [&'a str],
}

fn write_tree(
    cmd: &clap::Command,
    dir: &Path,
    ctx: &Page,
    parent: Option<&str>,
    n: &mut usize,
) -> io::Result<()> {
    let page = cmd.get_name().to_string();
    let path = dir.join(format!("{page}.1"));
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("{page}-{}", s.get_name()))
        .collect();
    let mut see_also: Vec<String> = Vec::new();
    if let Some(p) = parent {
        see_also.push(p.to_string());
    }
    see_also.extend(subs.iter().cloned());
    see_also.extend(ctx.others.iter().map(|o| o.to_string()));
    let text = render(cmd, ctx, &see_also)?;
    std::fs::write(&path, text)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    *n += 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub = sub.clone().name(format!("{page}-{}", sub.get_name()));
        write_tree(&sub, dir, ctx, Some(&page), n)?;
    }
    Ok(())
}

/// One page: clap_mangen's, with the synopsis, code spans, EXAMPLES and SEE ALSO fixed up.
fn render(cmd: &clap::Command, ctx: &Page, see_also: &[String]) -> io::Result<String> {
    let program = ctx.program;
    let (about, after, examples) = split_examples(cmd, program);
    let mut c = cmd
        .clone()
        .after_help(clap::builder::Resettable::<clap::builder::StyledStr>::Reset)
        .after_long_help(clap::builder::Resettable::<clap::builder::StyledStr>::Reset);
    let mut description = about;
    if !after.is_empty() {
        description = format!("{description}\n\n{after}");
    }
    if !description.is_empty() {
        c = c.long_about(description);
    }
    let mut buf = Vec::new();
    clap_mangen::Man::new(c)
        .source(ctx.source)
        .render(&mut buf)?;
    let page = String::from_utf8(buf).map_err(io::Error::other)?;

    let mut out = String::new();
    let mut section = String::new();
    let mut lines = page.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(s) = line.strip_prefix(".SH ") {
            if s == "VERSION" || s == "AUTHORS" {
                // Examples and references come before the version, as in most pages.
                out.push_str(&extra_sections(&examples, see_also));
                section = "END".into();
            } else {
                section = s.to_string();
            }
            out.push_str(line);
            out.push('\n');
            if s == "SYNOPSIS" {
                lines.next();
                out.push_str(&synopsis(cmd, program));
                out.push('\n');
            }
            continue;
        }
        if line.starts_with('.') {
            out.push_str(line);
        } else if section == "NAME" {
            out.push_str(&line.replace('`', ""));
        } else {
            out.push_str(&code_spans(line));
        }
        out.push('\n');
    }
    if section != "END" {
        out.push_str(&extra_sections(&examples, see_also));
    }
    Ok(out)
}

fn extra_sections(examples: &[String], see_also: &[String]) -> String {
    let mut s = String::new();
    if !examples.is_empty() {
        s.push_str(".SH EXAMPLES\n");
        // Unfilled and indented, each command on its line with its `# comment`, as in --help.
        s.push_str(".RS 4\n.nf\n");
        for e in examples {
            s.push_str(&escape(e));
            s.push('\n');
        }
        s.push_str(".fi\n.RE\n");
    }
    if !see_also.is_empty() {
        s.push_str(".SH \"SEE ALSO\"\n");
        let refs: Vec<String> = see_also
            .iter()
            .map(|p| format!("\\fB{}\\fR(1)", escape(p)))
            .collect();
        s.push_str(&refs.join(", "));
        s.push('\n');
    }
    s
}

/// The description without its example paragraphs, the after-help text that is not an
/// example, and the example command lines (with their `# comment`s).
fn split_examples(cmd: &clap::Command, program: &str) -> (String, String, Vec<String>) {
    let mut examples = Vec::new();
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut kept = Vec::new();
    for para in about.split("\n\n") {
        let t = para.trim();
        let inner = t
            .strip_prefix("Example: `")
            .and_then(|r| r.strip_suffix('`'))
            .filter(|c| c.starts_with(program) && !c.contains('`'));
        match inner {
            Some(c) => examples.push(c.to_string()),
            None => kept.push(para.to_string()),
        }
    }
    let after = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut rest = Vec::new();
    let mut in_examples = false;
    for line in after.lines() {
        let t = line.trim();
        if t == "Examples:" || t == "Example:" {
            in_examples = true;
            continue;
        }
        if in_examples && line.starts_with("  ") && !t.is_empty() {
            examples.push(t.to_string());
        } else if !(in_examples && t.is_empty()) {
            in_examples = false;
            rest.push(line.to_string());
        }
    }
    let rest = rest.join("\n").trim().to_string();
    (kept.join("\n\n"), rest, examples)
}

/// `NAME [-s|--long VALUE]… <POS>`: every visible option with its value name; a command of
/// more options than fit a screen's line gets `[OPTIONS]` and its required options only.
fn synopsis(cmd: &clap::Command, program: &str) -> String {
    let name = cmd
        .get_name()
        .strip_prefix(&format!("{program}-"))
        .map(|sub| format!("{program} {}", sub.replace('-', " ")))
        .unwrap_or_else(|| cmd.get_name().to_string());
    let mut parts = vec![format!("\\fB{}\\fR", escape(&name))];
    let opts: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .collect();
    let few = opts.len() <= 12;
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    if !few {
        parts.push("[\\fIOPTIONS\\fR]".into());
    }
    for a in opts {
        if !few && !a.is_required_set() {
            continue;
        }
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("\\fB\\-{s}\\fR|\\fB\\-\\-{}\\fR", escape(l)),
            (Some(s), None) => format!("\\fB\\-{s}\\fR"),
            (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", escape(l)),
            (None, None) => continue,
        };
        let takes = a.get_num_args().map(|n| n.takes_values()).unwrap_or(false)
            && !matches!(
                a.get_action(),
                clap::ArgAction::SetTrue
                    | clap::ArgAction::SetFalse
                    | clap::ArgAction::Count
                    | clap::ArgAction::Help
                    | clap::ArgAction::HelpShort
                    | clap::ArgAction::HelpLong
                    | clap::ArgAction::Version
            );
        let value = if takes {
            let v = a
                .get_value_names()
                .map(|v| {
                    v.iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
            let optional = a
                .get_num_args()
                .map(|n| n.min_values() == 0)
                .unwrap_or(false);
            if optional {
                format!("[=\\fI{}\\fR]", escape(&v))
            } else {
                format!(" \\fI{}\\fR", escape(&v))
            }
        } else {
            String::new()
        };
        let repeat = if matches!(
            a.get_action(),
            clap::ArgAction::Append | clap::ArgAction::Count
        ) {
            "..."
        } else {
            ""
        };
        if a.is_required_set() {
            parts.push(format!("{flag}{value}{repeat}"));
        } else {
            parts.push(format!("[{flag}{value}]{repeat}"));
        }
    }
    for p in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let v = p
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| p.get_id().as_str().to_uppercase());
        let many = matches!(p.get_action(), clap::ArgAction::Append)
            || p.get_num_args()
                .map(|n| n.max_values() > 1)
                .unwrap_or(false);
        let dots = if many { "..." } else { "" };
        let last = if p.is_last_set() { "\\-\\- " } else { "" };
        // A program that takes either a positional or a command (`ebsym TRACE`, `ebsym top
        // …`) shows the positional as needed, the command on a line of its own.
        if p.is_required_set() || has_subs {
            parts.push(format!("{last}\\fI{}\\fR{dots}", escape(&v)));
        } else {
            parts.push(format!("[{last}\\fI{}\\fR{dots}]", escape(&v)));
        }
    }
    let mut text = parts.join(" ");
    if has_subs {
        let bin = format!("\\fB{}\\fR \\fICOMMAND\\fR", escape(&name));
        if cmd.get_positionals().any(|a| !a.is_hide_set()) {
            text.push_str("\n.br\n");
            text.push_str(&bin);
            text.push_str(" ...");
        } else {
            text.push_str(" \\fICOMMAND\\fR");
        }
    }
    text
}

/// roff's escapes for text from the help: backslashes and hyphens (a `-` is a hyphen to
/// roff, `\-` the minus an option is written with).
fn escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// The help's Markdown code spans (`--by site`) in bold, without the backticks.
fn code_spans(line: &str) -> String {
    if line.matches('`').count() < 2 {
        return line.to_string();
    }
    let mut out = String::new();
    let mut parts = line.split('`');
    out.push_str(parts.next().unwrap_or(""));
    let rest: Vec<&str> = parts.collect();
    let pairs = rest.len() / 2;
    for (i, p) in rest.iter().enumerate() {
        if i < pairs * 2 {
            if i % 2 == 0 {
                out.push_str("\\fB");
                out.push_str(p);
                out.push_str("\\fR");
            } else {
                out.push_str(p);
            }
        } else {
            // An odd backtick left over: kept as it was.
            out.push('`');
            out.push_str(p);
        }
    }
    out
}

/// The shells completions are written for.
pub const SHELLS: [clap_complete::Shell; 3] = [
    clap_complete::Shell::Bash,
    clap_complete::Shell::Zsh,
    clap_complete::Shell::Fish,
];

/// `cmd` without its hidden subcommands (`man`, `completions`) and clap's `help`: bash's
/// script offers every subcommand it is given, hidden or not.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut c = cmd.clone().disable_help_subcommand(true);
    c.build();
    let hidden: Vec<String> = c
        .get_subcommands()
        .filter(|s| s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect();
    if hidden.is_empty() {
        return c;
    }
    // clap cannot remove a subcommand: rebuild the command from its visible parts.
    let mut v = clap::Command::new(c.get_name().to_string())
        .disable_help_subcommand(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args_conflicts_with_subcommands(c.is_args_conflicts_with_subcommands_set());
    if let Some(about) = c.get_about() {
        v = v.about(about.clone());
    }
    if let Some(version) = c.get_version() {
        v = v.version(version.to_string());
    }
    for a in c.get_arguments() {
        v = v.arg(a.clone());
    }
    for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
        v = v.subcommand(s.clone());
    }
    v
}

/// Prints the completion script of `cmd` for `shell` on `out`.
pub fn print_completions(
    cmd: &clap::Command,
    shell: clap_complete::Shell,
    out: &mut dyn io::Write,
) {
    let mut cmd = visible(cmd);
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, out);
}

/// Writes bash, zsh and fish completions of `cmd` into `dir` (created), under the names each
/// shell looks up: `NAME` (bash-completion), `_NAME` (zsh), `NAME.fish`. Returns the files.
pub fn write_completions(cmd: &clap::Command, dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = visible(cmd);
    let name = cmd.get_name().to_string();
    let mut files = Vec::new();
    for shell in SHELLS {
        let mut path = clap_complete::generate_to(shell, &mut cmd, &name, dir)?;
        if shell == clap_complete::Shell::Bash {
            // bash-completion loads /usr/share/bash-completion/completions/NAME.
            let plain = dir.join(&name);
            std::fs::rename(&path, &plain)?;
            path = plain;
        }
        files.push(path);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_become_bold() {
        assert_eq!(code_spans("a `b` c `d`"), "a \\fBb\\fR c \\fBd\\fR");
        assert_eq!(code_spans("a `b"), "a `b");
        assert_eq!(code_spans("`a` `b"), "\\fBa\\fR `b");
    }

    #[test]
    fn a_synopsis_names_values() {
        let cmd = clap::Command::new("p").subcommand(
            clap::Command::new("top")
                .arg(
                    clap::Arg::new("n")
                        .short('n')
                        .value_name("N")
                        .default_value("20"),
                )
                .arg(
                    clap::Arg::new("json")
                        .long("json")
                        .action(clap::ArgAction::SetTrue),
                )
                .arg(clap::Arg::new("trace").value_name("TRACE").required(true)),
        );
        let mut cmd = cmd;
        cmd.build();
        let top = cmd.find_subcommand("top").unwrap().clone().name("p-top");
        let s = synopsis(&top, "p");
        assert!(s.starts_with("\\fBp top\\fR"), "{s}");
        assert!(s.contains("[\\fB\\-n\\fR \\fIN\\fR]"), "{s}");
        assert!(s.contains("[\\fB\\-\\-json\\fR]"), "{s}");
        assert!(s.ends_with("\\fITRACE\\fR"), "{s}");
    }
}
