//! What to launch for a stdio upstream, and launching it.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// The program, its arguments, extra environment and working directory.
#[derive(Debug, Clone)]
pub(crate) struct StdioCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

impl StdioCommand {
    /// From already split words (`--upstream-cmd`); `None` when there are none.
    pub(crate) fn new(words: &[String]) -> Option<Self> {
        let (program, args) = words.split_first()?;
        Some(Self {
            program: program.clone(),
            args: args.to_vec(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// The command line for logs and error messages.
    pub(crate) fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|w| shlex::try_quote(w).map_or_else(|_| w.clone(), |q| q.into_owned()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Starts the process with piped stdin, stdout and stderr.
    pub(super) fn spawn(&self) -> std::io::Result<Child> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A gateway that dies must not leave servers behind.
            .kill_on_drop(true);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        // Its own process group, so launchers such as `npx` are stopped with the
        // servers they start.
        #[cfg(unix)]
        command.process_group(0);
        command.spawn()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_a_quoted_command_line() {
        let words = [
            "node".to_owned(),
            "/a b/x.js".to_owned(),
            "stdio".to_owned(),
        ];
        let command = StdioCommand::new(&words).unwrap();
        assert_eq!(command.display(), "node '/a b/x.js' stdio");
        assert!(StdioCommand::new(&[]).is_none());
    }
}
