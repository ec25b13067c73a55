//! The Lua scripts, one file each in `lua/`, compiled in and loaded once.
//!
//! Every write is one of these scripts (RD1). On Redis ≥ 7 the session
//! scripts and the batch run as the functions of one [`Library`] (`FCALL`,
//! loaded on first use and again when the server lost it); elsewhere
//! [`redis::Script`] calls a script by its SHA-1 (`EVALSHA`) and, when the
//! server answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`), loads it
//! and calls it again.
//!
//! A session script is the prelude (`lua/prelude.lua`, its placeholders
//! filled in here), `helpers.lua`, then the script's own file. The prelude
//! names the keys from
//! [`SESSION_KEY_NAMES`](crate::layout::SESSION_KEY_NAMES) and the
//! arguments every session script takes from [`PRELUDE_ARGS`], and sets
//! `EVENT_STRIDE`, so Rust and Lua cannot disagree on positions: the only
//! positional contract left is each script's own arguments, which its
//! header lists and a unit test checks against its Rust encoder.

use std::fmt::Write;
use std::sync::{LazyLock, OnceLock};

use redis::Script;

use crate::layout::{EVENTS_CHANNEL, PARTITION_KEY_NAMES, SESSION_KEY_NAMES, WORK_CHANNEL};

/// The arguments every session script gets first, in order: the session
/// id, the store clock's now (ms), the session's events channel and its
/// partition's work channel.
pub const PRELUDE_ARGS: [&str; 4] = ["SESSION", "NOW", "EVENTS", "WORK"];

/// The session keys a batch derives for every operation; it derives the
/// others of [`SESSION_KEY_NAMES`] only when an operation uses them
/// (`key(name)` in the prelude): scripts name those through it, never as
/// `K_{NAME}`, and the work channel as `key('work')`.
pub const EAGER_KEY_NAMES: [&str; 3] = ["log", "meta", "timed"];

/// Whether a batch derives the session key `name` only when an operation
/// uses it (see [`EAGER_KEY_NAMES`]).
pub fn lazy_key(name: &str) -> bool {
    SESSION_KEY_NAMES.contains(&name) && !EAGER_KEY_NAMES.contains(&name)
}

/// The most sessions whose key names a batch script keeps built between
/// calls (`enter_session` in the prelude).
pub const NAMES_KEPT: usize = 4096;

/// Arguments per new event in `append.lua` and `complete.lua`: id, type,
/// payload, extras (`extras` in helpers.lua: empty for the common event,
/// else `{settled 1|0}|{cause}|{encoded lane}|{lane}`). Every argument
/// costs the server a parse, an object and a Lua string, so the rare
/// attributes share one.
pub const EVENT_STRIDE: usize = 4;

/// The generated head of every session script: the key names, the
/// prelude's arguments (plus `NOW_S`, the clock as the text it came as)
/// and `EVENT_STRIDE`, as locals that `enter(k, argv)` sets from
/// `KEYS[k..]` and `argv`. A single script enters once; a batch script
/// enters once per operation. Scripts publish with `PUBLISH`.
#[cfg(test)]
pub fn prelude() -> String {
    prelude_with(Publish::Classic)
}

/// How scripts publish wake-ups and presence patches: the command the
/// prelude's `PUBLISH` local names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// `PUBLISH`: one server (or a REST provider), Redis ≥ 6.2.
    Classic,
    /// `SPUBLISH` (Redis ≥ 7): on a cluster a sharded channel lives on its
    /// slot's node, so a message goes to that node's subscribers only
    /// instead of over the cluster bus to every node. Every channel a
    /// script publishes on carries the hash tag of the script's keys, which
    /// a script on a cluster requires of `SPUBLISH`.
    Sharded,
}

/// `lua/prelude.lua`, whose header comment (up to the first blank line)
/// says what each placeholder stands for.
const PRELUDE: &str = include_str!("../lua/prelude.lua");

/// [`prelude`] with scripts publishing by `publish`: `lua/prelude.lua`
/// with its placeholders filled in ([`placeholders`]).
pub fn prelude_with(publish: Publish) -> String {
    let template = PRELUDE.split_once("\n\n").map_or(PRELUDE, |(_, body)| body);
    let mut out = template.to_owned();
    for (name, value) in placeholders(publish) {
        out = out.replace(&format!("{{{{{name}}}}}"), &value);
    }
    out
}

/// What each `{{NAME}}` of `lua/prelude.lua` stands for.
fn placeholders(publish: Publish) -> [(&'static str, String); 13] {
    let keys: Vec<String> = SESSION_KEY_NAMES
        .iter()
        .map(|name| format!("K_{}", name.to_uppercase()))
        .collect();
    let work_argument = PRELUDE_ARGS
        .iter()
        .position(|a| *a == "WORK")
        .map_or(0, |p| p + 1);
    let lazy: Vec<String> = SESSION_KEY_NAMES
        .iter()
        .enumerate()
        .filter(|(_, name)| lazy_key(name))
        .map(|(k, name)| format!("{name} = KEYS[k + {k}]"))
        .chain(std::iter::once(format!(
            "{WORK_CHANNEL} = argv[{work_argument}]"
        )))
        .collect();
    let enter_args: String = PRELUDE_ARGS
        .iter()
        .enumerate()
        .map(|(k, name)| match *name {
            "NOW" => format!("  NOW_S = argv[{}]\n  NOW = NOW_S + 0\n", k + 1),
            _ => format!("  {name} = argv[{}]\n", k + 1),
        })
        .collect();
    let partition: Vec<String> = PARTITION_KEY_NAMES
        .iter()
        .chain(std::iter::once(&WORK_CHANNEL))
        .map(|name| format!("name == '{name}'"))
        .collect();
    let built: Vec<String> = SESSION_KEY_NAMES
        .iter()
        .filter(|name| EAGER_KEY_NAMES.contains(name) && **name != "meta")
        .map(|name| format!("{name} = base .. '{name}'"))
        .collect();
    let session_keys: String = SESSION_KEY_NAMES
        .iter()
        .zip(&keys)
        .filter(|(name, _)| EAGER_KEY_NAMES.contains(name))
        .map(|(name, key)| {
            if *name == "meta" {
                format!("  {key} = meta\n")
            } else if PARTITION_KEY_NAMES.contains(name) {
                format!("  {key} = key('{name}')\n")
            } else {
                format!("  {key} = names.{name}\n")
            }
        })
        .collect();
    [
        (
            "PUBLISH",
            match publish {
                Publish::Classic => "PUBLISH",
                Publish::Sharded => "SPUBLISH",
            }
            .to_owned(),
        ),
        ("KEY_LOCALS", keys.join(", ")),
        ("ARG_LOCALS", PRELUDE_ARGS.join(", ")),
        ("EVENT_STRIDE", EVENT_STRIDE.to_string()),
        (
            "ENTER_KEYS",
            keys.iter()
                .enumerate()
                .map(|(k, key)| format!("  {key} = KEYS[k + {k}]\n"))
                .collect(),
        ),
        ("LAZY_KEYS", lazy.join(", ")),
        ("ENTER_ARGS", enter_args),
        ("PARTITION_NAMES", partition.join(" or ")),
        ("NAMES_KEPT", NAMES_KEPT.to_string()),
        ("META_CUT", ("meta".len() + 1).to_string()),
        ("BUILT_NAMES", built.join(", ")),
        ("SESSION_KEYS", session_keys),
        ("EVENTS_CHANNEL", EVENTS_CHANNEL.to_owned()),
    ]
}

/// The rules the scripts decide, as pure Lua functions (`lua/rules.lua`),
/// each held to its Rust rule's table by `tests/lua_rules.rs`.
pub const RULES: &str = include_str!("../lua/rules.lua");

/// A session script: prelude, rules, helpers, then the body for the one
/// session of `KEYS[1..]` and `ARGV`.
pub fn session(body: &str, publish: Publish) -> Script {
    Script::new(&format!(
        "{}\n{}\n{}\nenter(1, ARGV)\nlocal O, N = 0, #ARGV\nreturn reply_of((function()\n{}\nend)())",
        prelude_with(publish),
        RULES,
        include_str!("../lua/helpers.lua"),
        body
    ))
}

/// A partition script: the shared partition helpers, body.
pub fn partition(body: &str) -> Script {
    Script::new(&format!(
        "{}\n{}",
        include_str!("../lua/partition.lua"),
        body
    ))
}

/// `lua/config.lua` (no helpers).
pub static CONFIG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/config.lua")));

/// `lua/follow.lua` (no helpers).
pub static FOLLOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/follow.lua")));

/// A session script: its name (for batches), its body in `lua/`, and the
/// script (prelude, helpers, body) built on first use.
pub struct SessionScript {
    /// The name batches dispatch on.
    pub name: &'static str,
    /// The file's text.
    pub body: &'static str,
    script: OnceLock<Script>,
    sharded: OnceLock<Script>,
}

impl SessionScript {
    /// A script named `name` with this body.
    pub const fn new(name: &'static str, body: &'static str) -> Self {
        Self {
            name,
            body,
            script: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// The script run alone.
    pub fn script(&self) -> &Script {
        self.script
            .get_or_init(|| session(self.body, Publish::Classic))
    }

    /// The script run alone, publishing by `SPUBLISH` (on a cluster).
    pub fn sharded(&self) -> &Script {
        self.sharded
            .get_or_init(|| session(self.body, Publish::Sharded))
    }
}

/// Declares a session script from its file in `lua/`.
macro_rules! session_script {
    ($name:literal) => {
        $crate::lua::SessionScript::new($name, include_str!(concat!("../../lua/", $name, ".lua")))
    };
}
pub(crate) use session_script;

/// The batch script: several session operations in one call, each with its
/// own keys and arguments, run one after the other (each is checked and
/// written as if alone). `KEYS` holds the session keys of every operation
/// in turn; `ARGV[1]` is the number of operations, `ARGV[2]` the most
/// bytes of events a wake-up carries (`WAKE_CAP` in helpers.lua), then
/// for each operation its name, its argument count, and its arguments
/// (the prelude's first). Returns
/// the operations' replies, in order, in one flat array (see
/// `batcher::split_replies`): for each, the length of its array reply and
/// its elements, or -1 and the reply when it is not an array, or, for the
/// common reply of an append or a completion (`ok` and up to three
/// values, none with a comma), one string of them joined by commas, and
/// for consecutive such replies one string of those joined by `;`. (Redis
/// turns each nested reply array into a reply of its own, deferred length
/// and all: a third of a batched completion's cost of answering.)
///
/// A script's text runs again on every call (only a library's is kept
/// between calls), and each operation's closure captures dozens of the
/// helpers' locals, each capture a walk of Lua's list of open upvalues:
/// defining all of them cost more server time than the operations of a
/// typical batch. So the batch defines only the operations it carries,
/// named by a first pass over its arguments.
pub fn batch(scripts: &[&SessionScript]) -> Script {
    let mut out = operations(scripts, Publish::Classic, Define::Carried);
    out.push_str(&batch_loop());
    Script::new(&out)
}

/// The names of the operations a batch carries (see [`batch`] and
/// [`BATCH_LOOP`] for the layout of `ARGV`), as the keys of `WANT`.
const BATCH_WANTED: &str = concat!(
    "local OPS, WANT = {}, {}\n",
    "do\n",
    "  local a = 3\n",
    "  for _ = 1, ARGV[1] + 0 do\n",
    "    WANT[ARGV[a]] = true\n",
    "    a = a + 4 + ARGV[a + 1]\n",
    "  end\n",
    "end\n",
);

/// Which operations [`operations`] defines.
#[derive(Clone, Copy)]
enum Define {
    /// Every one: a library, whose text runs once.
    All,
    /// Those the call carries (`WANT`, see [`BATCH_WANTED`]): a batch
    /// script, whose text runs on every call.
    Carried,
}

/// Prelude, helpers and `OPS[name] = function(ARGV) body end` for each
/// script (see [`Define`]): what a batch script and a library define
/// before their calls.
fn operations(scripts: &[&SessionScript], publish: Publish, define: Define) -> String {
    let mut out = format!(
        "{}\n{}\n{}\n{}",
        prelude_with(publish),
        RULES,
        include_str!("../lua/helpers.lua"),
        match define {
            Define::All => "local OPS = {}\n",
            Define::Carried => BATCH_WANTED,
        }
    );
    for script in scripts {
        let name = script.name;
        let definition = format!("OPS['{name}'] = function(ARGV, O, N)\n{}\nend", script.body);
        let _ = match define {
            Define::All => writeln!(out, "{definition}"),
            Define::Carried => writeln!(out, "if WANT['{name}'] then {definition} end"),
        };
    }
    out
}

/// The batch's loop over its operations (see [`batch`]), reading `KEYS`
/// and `ARGV`.
// Each operation: name, own argument count n, session ('' = the
// previous operation's), store time ('' = the previous operation's),
// then its n own arguments, which its body reads as ARGV[O + 5..]
// (`O` the offset of its name, `N` the index of its last argument; a
// script alone has O = 0 and N = #ARGV). A new session takes the next key,
// its meta key. Consecutive appends and completions of one session
// form a group that shares one load and one flush (`GROUP` in
// helpers.lua); the group's first load also reads the ids and records
// its later operations will look up (`PREFETCH`). Only scripts that
// read the session's hash through `load`, `recs`, `rec` and `rows_of`
// (which see the group's unwritten writes) may join a group.
const BATCH_LOOP: &str = concat!(
    "local out, a, k, group, o = {}, 3, 1, false, 0\n",
    // Consecutive common replies wait here and go out as one string.
    "local run, rn = {}, 0\n",
    "local function close_run()\n",
    "  if rn > 0 then\n",
    "    out[o + 1] = rn == 1 and run[1] or table.concat(run, ';', 1, rn)\n",
    "    o, rn = o + 1, 0\n",
    "  end\n",
    "end\n",
    "local count = ARGV[1] + 0\n",
    "WAKE_CAP = ARGV[2] + 0\n",
    "for j = 1, count do\n",
    "  local name, n, session, now = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]\n",
    "  n = NUM[n] or num(n)\n",
    "  local grouped = name == 'complete' or name == 'append'\n",
    "  if group and (session ~= '' or not grouped) then\n",
    "    flush_group()\n",
    "    group = false\n",
    "  end\n",
    "  if session ~= '' then\n",
    "    enter_session(KEYS[k], session)\n",
    "    k = k + 1\n",
    "  end\n",
    "  if now ~= '' then\n",
    "    NOW_S = now\n",
    "    NOW = now + 0\n",
    "  end\n",
    "  local b = a + 4 + n\n",
    "  CONT = group\n",
    // A group forms only when the next operation continues it: one alone
    // keeps no cache of its writes.
    "  GROUP = group or (grouped and ARGV[b + 2] == '' and (ARGV[b] == 'complete' or ARGV[b] == 'append'))\n",
    "  PREFETCH = nil\n",
    "  if not CONT then\n",
    "    if GROUP then\n",
    "      local more = {}\n",
    "      for _ = j + 1, math.min(count, j + 200) do\n",
    "        local next = ARGV[b]\n",
    "        if ARGV[b + 2] ~= '' then break end\n",
    "        if next == 'complete' then\n",
    "          more[#more + 1] = ARGV[b + {{COMPLETE_INDEX}}]\n",
    // A completion that returns events also looks up their ids.
    "          if ARGV[b + 1] ~= '2' then\n",
    "            for e = 1, math.min(ARGV[b + {{COMPLETE_COUNT}}] + 0, 100) do\n",
    "              more[#more + 1] = '#' .. ARGV[b + {{COMPLETE_EVENTS}} + (e - 1) * EVENT_STRIDE]\n",
    "            end\n",
    "          end\n",
    "        elseif next == 'append' then\n",
    "          for e = 1, math.min(ARGV[b + {{APPEND_COUNT}}] + 0, 100) do\n",
    "            more[#more + 1] = '#' .. ARGV[b + {{APPEND_EVENTS}} + (e - 1) * EVENT_STRIDE]\n",
    "          end\n",
    "        else\n",
    "          break\n",
    "        end\n",
    "        b = b + 4 + ARGV[b + 1]\n",
    "      end\n",
    "      if #more > 0 then PREFETCH = more end\n",
    "    end\n",
    "  end\n",
    "  if GROUP then group = true end\n",
    // Appends and completions read their arguments where they lie
    // (`ARGV[O + k]`, up to `ARGV[N]`); the rest get a table of their own
    // (a copy costs a table per operation).
    "  local r, r2, r3, r4\n",
    "  if grouped then\n",
    "    r, r2, r3, r4 = OPS[name](ARGV, a - 1, a + 3 + n)\n",
    "  else\n",
    "    local argv = { unpack(ARGV, a, a + 3 + n) }\n",
    "    r, r2, r3, r4 = OPS[name](argv, 0, #argv)\n",
    "  end\n",
    // The common replies of appends and completions come as values
    // ('ok' and up to three texts), not as a table of their own, and go
    // into the reply as one string, `ok,{r2}[,{r3}[,{r4}]]`, and a run of
    // them as one string joined by `;`: one value to answer and to parse
    // for the run instead of up to five per operation.
    "  if r == 'ok' and r2 == '0' and r3 == nil then\n",
    "    rn = rn + 1\n",
    "    run[rn] = 'ok,0'\n",
    "  elseif r == 'ok' and r2 ~= nil then\n",
    "    rn = rn + 1\n",
    "    if r3 == nil then\n",
    "      run[rn] = 'ok,' .. r2\n",
    "    elseif r4 == nil then\n",
    "      run[rn] = 'ok,' .. r2 .. ',' .. r3\n",
    "    else\n",
    "      run[rn] = 'ok,' .. r2 .. ',' .. r3 .. ',' .. r4\n",
    "    end\n",
    "  elseif type(r) == 'table' then\n",
    "    close_run()\n",
    "    local m = 0\n",
    "    while r[m + 1] ~= nil do\n",
    "      m = m + 1\n",
    "      out[o + 1 + m] = r[m]\n",
    "    end\n",
    "    out[o + 1] = m\n",
    "    o = o + 1 + m\n",
    "  else\n",
    "    close_run()\n",
    "    out[o + 1] = -1\n",
    "    if r == nil then r = false end\n",
    "    out[o + 2] = r\n",
    "    o = o + 2\n",
    "  end\n",
    "  a = a + 4 + n\n",
    "end\n",
    "if group then flush_group() end\n",
    "close_run()\n",
    "return out\n",
);

/// The arguments the batch loop's read-ahead (`PREFETCH`) finds in the
/// operations after a group's first: each placeholder of [`BATCH_LOOP`],
/// the script, and the position and name its header gives the argument
/// (`ARGV[k]` alone is `ARGV[b - 1 + k]` in a batch, `b` the position of
/// the operation's name). A unit test reads the headers, so an argument
/// added to a script cannot leave the read-ahead reading another one.
pub(crate) const READ_AHEAD: [(&str, &str, usize, &str); 5] = [
    ("COMPLETE_INDEX", "complete", 5, "index"),
    ("COMPLETE_COUNT", "complete", 8, "count"),
    ("COMPLETE_EVENTS", "complete", 10, "events"),
    ("APPEND_COUNT", "append", 5, "count"),
    ("APPEND_EVENTS", "append", 13, "events"),
];

/// [`BATCH_LOOP`] with the read-ahead's positions ([`READ_AHEAD`]).
fn batch_loop() -> String {
    let mut out = BATCH_LOOP.to_owned();
    for (name, _, position, _) in READ_AHEAD {
        out = out.replace(&format!("{{{{{name}}}}}"), &(position - 1).to_string());
    }
    out
}

/// A function library (Redis ≥ 7, `FUNCTION LOAD`): the batch and every
/// session script as functions of one library.
///
/// A script call runs its whole text: it defines the helpers and the
/// batch's operations (some sixty closures) before its first command,
/// about 95 000 instructions per call, as much as two batched appends. A
/// library runs that text once, when it is loaded; a call (`FCALL`) only
/// runs its function. The library's name carries a hash of its text, so
/// instances of different versions can share a server, each loading its
/// own.
#[derive(Debug)]
pub struct Library {
    /// `a2_{hash}`: the library's name, also the first part of its
    /// functions' names.
    pub name: String,
    /// What `FUNCTION LOAD` takes.
    pub code: String,
    /// The batch's function name.
    pub batch: String,
    /// Each script's function name, by script name.
    functions: std::collections::HashMap<&'static str, String>,
}

impl Library {
    /// The library of `scripts` and their batch, publishing by `publish`.
    pub fn new(scripts: &[&SessionScript], publish: Publish) -> Self {
        // A library's text runs where only `redis.register_function` exists
        // (no `string`, `cjson`, ...), so the helpers and operations are
        // defined by the first call, once, and kept in `DEFS`.
        let mut body =
            String::from("local DEFS\nlocal function defs()\nif DEFS then return DEFS end\n");
        body.push_str("DEFS = (function()\n");
        body.push_str(&operations(scripts, publish, Define::All).replacen(
            SCRIPT_KEYS,
            LIBRARY_KEYS,
            1,
        ));
        // Every call starts from a clean grouping state, even after a call
        // that failed halfway (`GROUP`, `CONT`, `PREFETCH` in helpers.lua).
        body.push_str(
            "local function begin(keys)\n  KEYS = keys\n  \
             GROUP, CONT, PREFETCH = false, false, nil\n  reset_state()\nend\n",
        );
        body.push_str("local defs = {}\n");
        let _ = write!(
            body,
            "defs['batch'] = function(keys, ARGV)\nbegin(keys)\n{}end\n",
            batch_loop()
        );
        for script in scripts {
            let _ = writeln!(
                body,
                "defs['{name}'] = function(keys, args)\n  \
                 begin(keys)\n  enter(1, args)\n  return reply_of(OPS['{name}'](args, 0, #args))\nend",
                name = script.name
            );
        }
        body.push_str("return defs\nend)()\nreturn DEFS\nend\n");
        for name in std::iter::once("batch").chain(scripts.iter().map(|s| s.name)) {
            let _ = writeln!(
                body,
                "redis.register_function('{LIBRARY}_{name}', function(keys, args) return defs()['{name}'](keys, args) end)"
            );
        }
        let hash = Script::new(&body).get_hash().to_owned();
        let name = format!("a2_{}", &hash[..16]);
        let code = format!("#!lua name={name}\n{}", body.replace(LIBRARY, &name));
        Self {
            batch: format!("{name}_batch"),
            functions: scripts
                .iter()
                .map(|s| (s.name, format!("{name}_{}", s.name)))
                .collect(),
            code,
            name,
        }
    }

    /// The function that runs `script` alone, if the library has it.
    pub fn function(&self, script: &SessionScript) -> Option<&str> {
        self.functions.get(script.name).map(String::as_str)
    }
}

/// `enter` reads the keys through a local: a script fills it from the
/// global `KEYS` here; a library, whose text runs where no `KEYS` exists,
/// declares it empty (`LIBRARY_KEYS`) and its functions fill it from their
/// `keys` argument.
const SCRIPT_KEYS: &str = "local KEYS = KEYS\n";
const LIBRARY_KEYS: &str = "local KEYS\n";

/// Stands for the library's name in its text until the text is hashed.
const LIBRARY: &str = "A2_LIBRARY";

#[cfg(test)]
pub(crate) mod header;
#[cfg(test)]
mod tests;
