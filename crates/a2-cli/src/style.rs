//! Terminal colours, only when stdout is a terminal (and `NO_COLOR` is unset).

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy)]
pub struct Style {
    enabled: bool,
}

impl Style {
    pub fn detect() -> Self {
        let enabled = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Self { enabled }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// One method of [`Style`] per SGR code: `text` in that style.
macro_rules! styles {
    ($($name:ident = $code:literal),* $(,)?) => {
        impl Style {
            $(
                pub fn $name(self, text: &str) -> String {
                    self.paint($code, text)
                }
            )*
        }
    };
}

styles! {
    dim = "2",
    bold = "1",
    red = "31",
    green = "32",
    yellow = "33",
    magenta = "35",
    cyan = "36",
}

/// `n` and `noun`, plural unless `n` is 1: "1 failure", "3 failures".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_singular_only_for_one() {
        assert_eq!(super::count(0, "failure"), "0 failures");
        assert_eq!(super::count(1, "failure"), "1 failure");
        assert_eq!(super::count(3, "session"), "3 sessions");
    }
}
