//! Group commit of session scripts (RD7): concurrent operations of a store
//! instance travel together in one batch script call (`lua::batch`), so
//! the per-call cost of a script (parsing the call, entering Lua) is paid
//! once per batch instead of once per operation.
//!
//! Nothing waits for a batch to fill: when fewer than [`IN_FLIGHT`] calls
//! ([`IN_FLIGHT_ROUND_TRIPS`] over REST) are under way, an operation
//! starts a call as soon as the tasks that are ready now have had their
//! turn (one pass of the scheduler), taking with it whatever they queued
//! meanwhile (alone, it is sent as its own script); otherwise it queues,
//! and the next call to finish takes everything queued as one batch. So
//! batches grow only under load, exactly when the server is the
//! bottleneck, and a quiet store adds no latency.
//!
//! Each operation in a batch is checked and written as if it ran alone
//! (the batch runs them one after the other inside one atomic script);
//! callers get their own reply. A batch that fails as a whole (the
//! connection, a timeout) fails each of its operations with that error.

use std::sync::{Arc, Mutex, OnceLock};

use a2_core::{Error, Millis, Result};
use redis::{Script, Value};
use tokio::sync::oneshot;

use crate::args::Args;
use crate::codec::{array, broken};
use crate::layout::SessionKeys;
use crate::lua::{Library, Publish, SessionScript};
use crate::transport::{FunctionCall, Transport};

/// Script calls under way at once per store instance: one on the server,
/// the others being sent or answered.
pub(crate) const IN_FLIGHT: usize = 4;

/// Calls under way at once where every call is a round trip of its own
/// (`Transport::fewer_round_trips`: REST). There each call also pays an
/// HTTP request and the script's definitions (a script's text runs on
/// every call), so fewer, larger batches cost less per operation: the REST
/// work cycle did 0.62 of RESP's events/s with four, 0.65–0.69 with two.
pub(crate) const IN_FLIGHT_ROUND_TRIPS: usize = 2;

/// The most operations, and argument bytes, in one batch.
const MAX_OPS: usize = 256;
const MAX_BYTES: usize = 1 << 20;

/// Operations with more arguments run alone: a batch unpacks each
/// operation's arguments into a Lua table.
pub(crate) const MAX_BATCHED_ARGS: usize = 2000;

/// One operation: its script, session, store time, its own arguments (the
/// prelude's are added when it is sent), and where its reply goes.
pub(crate) struct Job {
    pub(crate) script: &'static SessionScript,
    pub(crate) keys: Arc<SessionKeys>,
    pub(crate) session: String,
    pub(crate) now: Millis,
    pub(crate) args: Args,
    reply: oneshot::Sender<Result<Value>>,
}

impl Job {
    fn bytes(&self) -> usize {
        self.args.bytes() + self.session.len() + 64
    }
}

/// The arguments of a session script run alone: the prelude's (`SESSION`,
/// `NOW`, `EVENTS`, `WORK`, see `lua::PRELUDE_ARGS`), then its own.
pub(crate) fn alone_args(keys: &SessionKeys, session: &str, now: Millis, own: &Args) -> Args {
    let prelude = session.len() + keys.events_channel.len() + keys.work_channel.len() + 20;
    let mut args = Args::with_capacity(4 + own.len(), prelude + own.bytes());
    args.push(session.as_bytes());
    args.push_number(now);
    args.push(keys.events_channel.as_bytes());
    args.push(keys.work_channel.as_bytes());
    args.extend(own);
    args
}

struct State {
    queue: Vec<Job>,
    /// Calls that may still start.
    free: usize,
}

/// Counts an operation in [`Batcher::waiting`] until it drops: when the
/// reply came, or when the caller gave up waiting for it. Only tests read
/// the count, so only the `testing` feature keeps it: the path of every
/// operation pays nothing for it otherwise.
#[cfg(feature = "testing")]
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

#[cfg(feature = "testing")]
impl<'a> Waiting<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(count)
    }
}

#[cfg(feature = "testing")]
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Sends session scripts alone or in batches (see the module docs).
pub(crate) struct Batcher {
    transport: Arc<dyn Transport>,
    batch: &'static OnceLock<Script>,
    library: &'static OnceLock<Library>,
    scripts: &'static [&'static SessionScript],
    /// The most bytes of events one wake-up carries
    /// (`RedisOptions::wake_carry_cap`): a batch joins the wake-ups of a
    /// session's consecutive writes up to it.
    wake_cap: usize,
    // A std mutex: held for a few vector operations, never across an await.
    state: Mutex<State>,
    /// Operations handed to the batcher whose reply has not come back
    /// (queued or sent): what [`Batcher::waiting`] reports.
    #[cfg(feature = "testing")]
    waiting: std::sync::atomic::AtomicUsize,
}

impl Batcher {
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        batch: &'static OnceLock<Script>,
        library: &'static OnceLock<Library>,
        scripts: &'static [&'static SessionScript],
        wake_cap: usize,
    ) -> Self {
        let free = if transport.fewer_round_trips() {
            IN_FLIGHT_ROUND_TRIPS
        } else {
            IN_FLIGHT
        };
        Self {
            transport,
            batch,
            library,
            scripts,
            wake_cap,
            state: Mutex::new(State {
                queue: Vec::new(),
                free,
            }),
            #[cfg(feature = "testing")]
            waiting: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many operations were handed to the batcher and wait for their
    /// reply, queued or sent.
    #[cfg(feature = "testing")]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state whole, so a poisoned lock
        // (a panic elsewhere while holding it) is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one operation of `session` at store time `now`, with its own
    /// arguments `args`, alone or in a batch, and returns its reply.
    pub(crate) async fn run(
        self: &Arc<Self>,
        script: &'static SessionScript,
        keys: Arc<SessionKeys>,
        session: &str,
        now: Millis,
        args: Args,
    ) -> Result<Value> {
        // In a batch an empty session means "the previous operation's"; the
        // store never sends one (ids are checked), but an empty id must
        // never pass for another session's, so it would go alone.
        if args.len() > MAX_BATCHED_ARGS || session.is_empty() {
            let args = alone_args(&keys, session, now, &args);
            return self.send_one(script, &keys, &args).await;
        }
        let (tx, rx) = oneshot::channel();
        let job = Job {
            script,
            keys,
            session: session.to_owned(),
            now,
            args,
            reply: tx,
        };
        #[cfg(feature = "testing")]
        let _waiting = Waiting::new(&self.waiting);
        let start = {
            let mut state = self.lock();
            state.queue.push(job);
            if state.free > 0 {
                state.free -= 1;
                true
            } else {
                false
            }
        };
        if start {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                // The call starts after the tasks that are ready now have
                // run: operations they start meanwhile (the callers a
                // batch's replies woke, each starting its next one) join
                // this call instead of each taking a call of its own.
                tokio::task::yield_now().await;
                let jobs = {
                    let mut state = this.lock();
                    if state.queue.is_empty() {
                        // A call that finished took them all.
                        state.free += 1;
                        return;
                    }
                    take(&mut state.queue)
                };
                this.drive(jobs).await
            });
        }
        rx.await
            .map_err(|_| Error::unavailable("the batch carrying this call was dropped"))?
    }

    /// Sends `jobs`, then whatever queued meanwhile, until the queue is
    /// empty; then gives its slot back (under the lock, so no job is left
    /// queued without a call to take it).
    async fn drive(self: Arc<Self>, mut jobs: Vec<Job>) {
        loop {
            self.send(jobs).await;
            let mut state = self.lock();
            if state.queue.is_empty() {
                state.free += 1;
                return;
            }
            jobs = take(&mut state.queue);
        }
    }

    /// One script alone, sent once more after a lost connection when its
    /// replay is harmless (RD8).
    async fn send_one(
        &self,
        script: &'static SessionScript,
        keys: &SessionKeys,
        args: &Args,
    ) -> Result<Value> {
        let replayable = crate::replay::session_script(script);
        let library = self.library();
        if let Some(function) = library.function(script) {
            let keys = keys.keys();
            if let Some(reply) = self
                .transport
                .function(
                    FunctionCall::new(library, function, &keys, args),
                    replayable,
                )
                .await?
            {
                return Ok(reply);
            }
        }
        if replayable {
            self.transport
                .script_replayable(script.script(), &keys.keys(), args)
                .await
        } else {
            self.transport
                .script(script.script(), &keys.keys(), args)
                .await
        }
    }

    async fn send(&self, mut jobs: Vec<Job>) {
        if jobs.len() == 1 {
            let job = jobs.pop().expect("one job");
            let args = alone_args(&job.keys, &job.session, job.now, &job.args);
            let reply = self.send_one(job.script, &job.keys, &args).await;
            let _ = job.reply.send(reply);
            return;
        }
        // A session's operations next to each other, each session's in the
        // order they came (a stable sort): operations of different sessions
        // touch different keys, so their order within the batch is free,
        // and a run of one session's writes shares its reads and writes of
        // the session's state (`GROUP` in helpers.lua). Sorted by the
        // address of the session's cached keys (`Inner::session_keys`), not
        // by their names: the same order for what matters, without
        // comparing strings. (Should the cache start over between two
        // operations of one session, they form two runs, each of which
        // loads the session afresh: slower, never wrong.)
        jobs.sort_by_key(|job| Arc::as_ptr(&job.keys) as usize);
        // Each operation: its name, its own argument count, its session
        // (empty when it is the previous operation's, whose keys it then
        // shares), its store time (empty when the previous operation's),
        // its own arguments. A new session adds its `meta` key to `KEYS`;
        // the script derives the session's other names from it
        // (`enter_session` in `lua::prelude`).
        let count = 2 + jobs.iter().map(|j| j.args.len() + 4).sum::<usize>();
        let bytes: usize = jobs.iter().map(Job::bytes).sum();
        let mut args = Args::with_capacity(count, bytes);
        args.push_number(jobs.len());
        args.push_number(self.wake_cap);
        let mut keys: Vec<&str> = Vec::new();
        let mut previous: Option<(&str, Millis)> = None;
        for job in &jobs {
            args.push(job.script.name.as_bytes());
            args.push_number(job.args.len());
            let same_session = previous.is_some_and(|(meta, _)| meta == job.keys.meta);
            if same_session {
                args.push(b"");
            } else {
                args.push(job.session.as_bytes());
                keys.push(&job.keys.meta);
            }
            if previous.is_some_and(|(_, now)| now == job.now) {
                args.push(b"");
            } else {
                args.push_number(job.now);
            }
            previous = Some((&job.keys.meta, job.now));
            args.extend(&job.args);
        }
        // A batch is replayed only when every operation in it may be.
        let replayable = jobs
            .iter()
            .all(|job| crate::replay::session_script(job.script));
        let library = self.library();
        let sent = match self
            .transport
            .function(
                FunctionCall::new(library, &library.batch, &keys, &args),
                replayable,
            )
            .await
        {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => self.send_script(&keys, &args, replayable).await,
            Err(error) => Err(error),
        };
        let replies = sent.and_then(|reply| split_replies(array(reply)?, jobs.len()));
        match replies {
            Ok(replies) => {
                for (job, reply) in jobs.into_iter().zip(replies) {
                    let _ = job.reply.send(Ok(reply));
                }
            }
            Err(error) => {
                for job in jobs {
                    let _ = job.reply.send(Err(error.clone()));
                }
            }
        }
    }
}

impl Batcher {
    /// The library of this batcher's scripts (built on first use).
    fn library(&self) -> &'static Library {
        self.library
            .get_or_init(|| Library::new(self.scripts, Publish::Classic))
    }

    /// The batch as a script (where functions do not run).
    async fn send_script(&self, keys: &[&str], args: &Args, replayable: bool) -> Result<Value> {
        let script = self.batch.get_or_init(|| crate::lua::batch(self.scripts));
        if replayable {
            self.transport.script_replayable(script, keys, args).await
        } else {
            self.transport.script(script, keys, args).await
        }
    }
}

/// The replies of a batch's `count` operations from its flat reply (see
/// `lua::batch`): for each, the length of its array reply and its
/// elements, or -1 and a reply that is not an array, or the common reply
/// of an append or a completion as one string, its values joined by
/// commas, which goes to the operation as it came (its decoder reads the
/// numbers where they lie, `codec::joined_ok`).
pub(crate) fn split_replies(flat: Vec<Value>, count: usize) -> Result<Vec<Value>> {
    let mut replies = Vec::with_capacity(count);
    let mut values = flat.into_iter();
    while let Some(length) = values.next() {
        let length = match length {
            Value::Int(length) => length,
            Value::BulkString(joined) if joined.starts_with(b"ok,") => {
                split_run(joined, &mut replies)?;
                continue;
            }
            _ => {
                return Err(broken(
                    "a batch reply without the length of an operation's reply",
                ));
            }
        };
        let reply = match usize::try_from(length) {
            Ok(length) => {
                let elements: Vec<Value> = values.by_ref().take(length).collect();
                if elements.len() < length {
                    return Err(broken("a batch reply cut short"));
                }
                Value::Array(elements)
            }
            Err(_) => values
                .next()
                .ok_or_else(|| broken("a batch reply cut short"))?,
        };
        replies.push(reply);
    }
    if replies.len() == count {
        Ok(replies)
    } else {
        Err(broken("a batch answered for another number of calls"))
    }
}

/// Hands on a run of common replies, `ok,…[;ok,…]…` (`lua::batch`), as
/// one reply each.
fn split_run(joined: Vec<u8>, replies: &mut Vec<Value>) -> Result<()> {
    if !joined.contains(&b';') {
        replies.push(Value::BulkString(joined));
        return Ok(());
    }
    for reply in joined.split(|b| *b == b';') {
        if !reply.starts_with(b"ok,") {
            return Err(broken(
                "a run of joined replies with one that is not `ok,…`",
            ));
        }
        replies.push(Value::BulkString(reply.to_vec()));
    }
    Ok(())
}

/// Takes up to `MAX_OPS` jobs and `MAX_BYTES` of arguments from the queue,
/// oldest first.
fn take(queue: &mut Vec<Job>) -> Vec<Job> {
    let mut bytes = 0;
    let mut n = 0;
    for job in queue.iter() {
        bytes += job.bytes();
        if n > 0 && (n == MAX_OPS || bytes > MAX_BYTES) {
            break;
        }
        n += 1;
    }
    if n == queue.len() {
        std::mem::take(queue)
    } else {
        let rest = queue.split_off(n);
        std::mem::replace(queue, rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn split_replies_rebuilds_each_operation_s_reply() {
        let flat = vec![
            Value::Int(2),
            text("ok"),
            Value::Int(7),
            Value::Int(0),
            Value::Int(-1),
            Value::Int(3),
            Value::Int(1),
            Value::Array(vec![text("row")]),
        ];
        let replies = split_replies(flat, 4).unwrap();
        assert_eq!(
            replies,
            vec![
                Value::Array(vec![text("ok"), Value::Int(7)]),
                Value::Array(vec![]),
                Value::Int(3),
                Value::Array(vec![Value::Array(vec![text("row")])]),
            ]
        );
    }

    #[test]
    fn split_replies_hands_on_the_joined_common_replies() {
        let flat = vec![
            text("ok,12,1,12"),
            Value::Int(-1),
            Value::Int(3),
            text("ok,0"),
        ];
        let replies = split_replies(flat, 3).unwrap();
        assert_eq!(
            replies,
            vec![text("ok,12,1,12"), Value::Int(3), text("ok,0")]
        );
        // A run of them comes as one string.
        let run = vec![text("ok,3,1,3;ok,0;ok,4,0"), Value::Int(-1), Value::Int(1)];
        assert_eq!(
            split_replies(run, 4).unwrap(),
            vec![
                text("ok,3,1,3"),
                text("ok,0"),
                text("ok,4,0"),
                Value::Int(1)
            ]
        );
        // As the decoders read them.
        let Ok(crate::ops::append::Reply::Written {
            first,
            has_pending,
            claimed,
        }) = crate::ops::append::decode("s", replies[0].clone())
        else {
            panic!("an append's joined reply")
        };
        assert_eq!((first, has_pending, claimed), (12, true, vec![12]));
        let Ok(crate::ops::append::Reply::Written {
            first,
            has_pending,
            claimed,
        }) = crate::ops::append::decode("s", text("ok,5,0"))
        else {
            panic!("an append's joined reply that claimed nothing")
        };
        assert_eq!((first, has_pending, claimed), (5, false, vec![]));
        assert!(matches!(
            crate::ops::complete::decode("s", replies[2].clone()),
            Ok(crate::ops::complete::Reply::Written { first: 0 })
        ));
        // Read as the array it stands for by any other decoder.
        let (tag, items) = crate::codec::tagged(text("ok,4,0")).unwrap();
        assert_eq!(tag, "ok");
        assert_eq!(items.collect::<Vec<_>>(), vec![text("4"), text("0")]);
        // Not numbers, or too short: broken.
        assert!(crate::ops::append::decode("s", text("ok,x,1")).is_err());
        assert!(crate::ops::append::decode("s", text("ok,4")).is_err());
        assert!(crate::ops::complete::decode("s", text("ok,4,1")).is_err());
        assert!(crate::ops::append::decode("s", text("ok,1,0,2,3")).is_err());
        assert!(crate::ops::append::decode("s", text("ok,1,,2")).is_err());
        assert!(crate::ops::complete::decode("s", text("ok,99999999999999999999")).is_err());
        assert!(matches!(
            crate::ops::complete::decode("s", text("ok,9999999999999999999")),
            Ok(crate::ops::complete::Reply::Written {
                first: 9_999_999_999_999_999_999
            })
        ));
    }

    #[test]
    fn split_replies_refuses_a_reply_that_does_not_add_up() {
        assert!(split_replies(vec![Value::Int(2), text("ok")], 1).is_err());
        assert!(split_replies(vec![Value::Int(1), text("ok")], 2).is_err());
        assert!(split_replies(vec![text("ok")], 1).is_err());
        assert!(split_replies(vec![Value::Int(-1)], 1).is_err());
        assert!(split_replies(vec![text("ok,1;ok,2")], 1).is_err());
        assert!(split_replies(vec![text("ok,1;;ok,2")], 3).is_err());
        assert!(split_replies(vec![text("ok,1;x")], 2).is_err());
    }
}
