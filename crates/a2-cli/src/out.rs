//! Printing that survives a closed pipe. `println!` panics when stdout is a
//! pipe whose reader has gone (`a2 inspect … | head -1`), and under
//! `a2 demo | head` that panic hit handler tasks, which the runtime then
//! recorded as failed attempts. [`say!`] ends the process quietly instead
//! (exit status 0: nobody is reading any more); [`tell!`] writes to stderr
//! and drops what a closed stderr cannot take.

use std::io::Write;

/// Writes `args` and a line end to stdout. A closed pipe ends the process
/// with status 0; any other failure to write (a full disk) ends it with
/// status 1, said on stderr.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(error) = written {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        err_line(format_args!("a2: cannot write to stdout: {error}"));
        std::process::exit(1);
    }
}

/// Writes `args` and a line end to stderr, if anyone can read it.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `println!` that ends the process quietly on a closed stdout ([`line`]).
macro_rules! say {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics ([`err_line`]).
macro_rules! tell {
    ($($arg:tt)*) => {
        $crate::out::err_line(format_args!($($arg)*))
    };
}

pub(crate) use {say, tell};
