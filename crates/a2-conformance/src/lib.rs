//! The a2 contract as tests: one `pub async fn` per behaviour, each naming the
//! rule ids it checks, run by every store through [`conformance!`]. The
//! contract is `docs/spec.md`; it names its rules `A1`, `C2`, … and "SPEC §n"
//! in these docs is its section n.
//!
//! A store's test file opens the store for a case through a [`SetupFn`]:
//!
//! ```no_run
//! // tests/conformance.rs of a store crate
//! use a2_conformance::a2_core::{MemoryStore, StoreOptions};
//!
//! async fn setup(options: StoreOptions) -> a2_conformance::Stores {
//!     let store = std::sync::Arc::new(MemoryStore::new(options));
//!     a2_conformance::Stores::new(store.clone(), store)
//! }
//!
//! mod memory {
//!     a2_conformance::conformance!(super::setup);
//! }
//! # fn main() {}
//! ```
//!
//! A store whose peer is a separate instance on the same data (another
//! connection) says so through its [`Capabilities`]:
//! `Stores::new(store, peer).with_caps(Capabilities::default().with_independent_peer(true))`.
//!
//! `cargo test` then lists every case under the module, for example
//! `memory::a5_retry_returns_original_rows`, plus `memory::model_based_property`.
//!
//! # Layout
//! - [`cases`]: the cases, one module per SPEC section (append, read, claim,
//!   renew, complete, fail, release, revive, pending, state, presence, feeds,
//!   followers (shared readers),
//!   inspection, lifecycle, fork, cancel, delay), plus races, limits (bad input), names (strange names)
//!   and values (JSON nesting and round trips, limits and ttls at the top
//!   of their types).
//! - [`property`]: the model-based property test over random operation sequences.
//! - [`differential`]: random operation sequences run on the memory store and
//!   on another store, whose results must be identical.
//! - `support` (private): what the cases share (appending, claiming,
//!   comparing the whole visible state before and after bad input).
//! - this file: the harness ([`SetupFn`], [`Stores`], [`Fixture`]) and the
//!   [`conformance!`] and [`for_each_case!`] macros.
#![deny(missing_docs)]

use std::future::Future;
use std::sync::Arc;

use a2_core::{ManualClock, Store, StoreOptions};
use futures::future::BoxFuture;

pub mod cases;
pub mod differential;
pub mod property;

/// The rows a fork of `target` holds for these rows of its source (FK2):
/// the same events and records in the other session, leases released.
/// What the fork cases, the property test and the stores' own fork tests
/// compare a fork's rows with.
///
/// ```
/// # use a2_conformance::{a2_core::{NewEvent, StoredEvent}, forked_rows};
/// let mut row = StoredEvent::appended("e1".into(), NewEvent::new("t", serde_json::json!(1)), "s", 1, 0, None, None);
/// row.claim_holder = Some("w".into());
/// let forked = forked_rows(&[row], "f");
/// assert_eq!(forked[0].event.session_id, "f");
/// assert_eq!(forked[0].claim_holder, None);
/// ```
pub fn forked_rows(rows: &[a2_core::StoredEvent], target: &str) -> Vec<a2_core::StoredEvent> {
    rows.iter()
        .map(|row| {
            let mut row = row.clone();
            row.event.session_id = target.to_owned();
            row.claim_holder = None;
            row.claim_expires_at = None;
            row
        })
        .collect()
}
mod support;

/// Re-exported so that [`conformance!`] expands without extra dependencies
/// in the store's crate.
pub use a2_core;
/// Re-exported for [`SetupFn`]'s `BoxFuture`.
pub use futures;
/// Re-exported for stores' setup code.
pub use tokio;

/// Opens a fresh, empty store for one case with the given options, plus a
/// second handle on the same data as another process would open it.
pub type SetupFn = fn(StoreOptions) -> BoxFuture<'static, Stores>;

/// Damages the stored log of a session behind the store's back, as an
/// eviction, an operator or a half-applied write would (E1): the entry at
/// `index` of `session` is deleted (a SQLite row, a Redis stream entry)
/// or, where nothing can go missing (the memory store), left undecodable.
/// Test-only; every store's setup gives one (see [`Stores::with_damage`]).
pub type DamageFn = Arc<dyn Fn(String, u64) -> BoxFuture<'static, ()> + Send + Sync>;

/// What a [`SetupFn`] returns.
#[derive(Clone)]
pub struct Stores {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Another handle on the same data (another connection, as a second
    /// process would have). For the memory store, the same store.
    pub peer: Arc<dyn Store>,
    /// What this backend can and cannot do.
    pub caps: Capabilities,
    /// How to damage a log for the E1 case; a store without one fails it.
    pub damage: Option<DamageFn>,
}

impl Stores {
    /// A store and its peer, with default capabilities.
    pub fn new(store: Arc<dyn Store>, peer: Arc<dyn Store>) -> Self {
        Self {
            store,
            peer,
            caps: Capabilities::default(),
            damage: None,
        }
    }

    /// Sets how the E1 case damages a log ([`DamageFn`]).
    pub fn with_damage<F, Fut>(mut self, damage: F) -> Self
    where
        F: Fn(String, u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.damage = Some(Arc::new(move |session, index| {
            Box::pin(damage(session, index))
        }));
        self
    }

    /// Replaces the capabilities.
    pub fn with_caps(mut self, caps: Capabilities) -> Self {
        self.caps = caps;
        self
    }
}

/// Differences between backends, passed in by the backend, never detected.
///
/// ```
/// let caps = a2_conformance::Capabilities::default().with_independent_peer(true);
/// assert!(caps.independent_peer);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// The peer is its own store instance on the same data (another
    /// connection) and stays open when `store` is closed, so the feed cases
    /// of ST5 can continue a stream through it after closing `store`. False
    /// for the memory store, whose peer is the store itself.
    pub independent_peer: bool,
    /// Presence subscriptions learn about changes by polling, so patches
    /// that applied between two polls arrive merged into their difference
    /// (`PresenceView::resync`): a subscriber still ends up with what was
    /// applied, in order, but not patch by patch. False for stores that
    /// push every patch.
    pub presence_patches_merge: bool,
    /// The store pushes PS2 wake-ups (`Store::pending_wakeups`); without
    /// it the stream never yields and workers find work by listing only.
    pub pending_wakeups: bool,
    /// The store pushes CN5 cancels (`Store::cancellations`) to its peer;
    /// without it the stream never yields and workers learn of cancels
    /// when they renew.
    pub cancellations: bool,
}

impl Capabilities {
    /// Sets [`Capabilities::cancellations`].
    pub fn with_cancellations(mut self, cancellations: bool) -> Self {
        self.cancellations = cancellations;
        self
    }

    /// Sets [`Capabilities::pending_wakeups`].
    pub fn with_pending_wakeups(mut self, wakeups: bool) -> Self {
        self.pending_wakeups = wakeups;
        self
    }

    /// Sets [`Capabilities::presence_patches_merge`].
    pub fn with_presence_patches_merge(mut self, merge: bool) -> Self {
        self.presence_patches_merge = merge;
        self
    }

    /// Sets [`Capabilities::independent_peer`].
    pub fn with_independent_peer(mut self, independent: bool) -> Self {
        self.independent_peer = independent;
        self
    }
}

/// A store opened for a case with a manual clock.
pub struct Fixture {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Another handle on the same data.
    pub peer: Arc<dyn Store>,
    /// The clock both handles use.
    pub clock: Arc<ManualClock>,
    /// The backend's capabilities.
    pub caps: Capabilities,
    /// How to damage a log (E1).
    pub damage: Option<DamageFn>,
}

/// The clock's starting time in every case: 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;

/// Opens a store with a [`ManualClock`] at [`START_MS`] and the other options
/// at their defaults.
pub async fn fixture(setup: SetupFn) -> Fixture {
    fixture_with(setup, StoreOptions::default()).await
}

/// Opens a store with a [`ManualClock`] at [`START_MS`] replacing the clock of
/// `options`.
pub async fn fixture_with(setup: SetupFn, options: StoreOptions) -> Fixture {
    let clock = Arc::new(ManualClock::new(START_MS));
    let stores = setup(options.with_clock(clock.clone())).await;
    Fixture {
        store: stores.store,
        peer: stores.peer,
        clock,
        caps: stores.caps,
        damage: stores.damage,
    }
}

/// Runs one case to completion on a fresh multi-threaded tokio runtime with
/// two worker threads: what `#[tokio::test(flavor = "multi_thread",
/// worker_threads = 2)]` expands to, spelled out so that [`conformance!`]
/// needs no `tokio` dependency in the store's crate.
///
/// # Panics
/// When the runtime cannot be built, or when the case fails.
pub fn run_case<F: Future<Output = ()>>(case: F) {
    // A test that cannot build its runtime cannot run at all; failing loudly
    // is the only useful report.
    #[allow(clippy::expect_used)]
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime for a conformance case");
    runtime.block_on(case);
}

/// Calls `$callback! { module::case, … }` with every case of the suite: the
/// one list of cases, so that adding a case is one line here.
///
/// ```
/// macro_rules! count {
///     ($($module:ident :: $case:ident),* $(,)?) => { [$(stringify!($case)),*].len() };
/// }
/// assert!(a2_conformance::for_each_case!(count) > 100);
/// ```
#[macro_export]
macro_rules! for_each_case {
    ($($callback:tt)+) => {
        $($callback)+! {
            append::a1_batch_gets_dense_indexes_after_the_frontier,
            append::a1_a7_bad_event_late_in_batch_writes_nothing,
            append::a2_empty_batch_writes_nothing_and_reports_has_pending,
            append::a3_same_id_twice_in_batch_is_partial_duplicate,
            append::a4_id_of_another_session_is_another_event,
            append::a5_retry_returns_original_rows,
            frontier::a13_an_append_at_another_frontier_writes_nothing,
            frontier::a13_replays_closed_sessions_and_empty_batches_come_first,
            frontier::a13_racing_writers_at_one_frontier_win_one_at_a_time,
            append::a5_retry_of_a_subset_returns_rows_in_index_order,
            append::a5_retry_with_other_type_or_payload_is_partial_duplicate,
            append::a6_some_ids_existing_is_partial_duplicate,
            append::a7_cause_must_name_an_existing_index,
            append::a7_cause_of_a_stale_attempt_is_superseded,
            append::a7_cause_of_a_dead_lettered_event_is_superseded,
            append::a7_progress_events_carry_their_cause,
            append::a8_settled_event_is_processed_at_append,
            append::a9_unsettled_events_are_pending_and_lanes_are_fifo,
            append::a9_lanes_are_independent,
            append::a10_has_pending_reflects_the_session_after_the_write,
            append::a11_ids_come_from_the_id_source_and_time_from_the_clock,
            read::r1_reads_the_requested_range_in_order,
            read::r1_unknown_session_reads_as_empty,
            read::r1_large_range_reads_every_row,
            read::r2_history_pages_backwards,
            read::e1_a_damaged_log_is_corrupted_on_every_read,
            claim::c1_nothing_pending_is_settled,
            claim::c2_claims_ready_events_in_index_order_up_to_limit,
            claim::c2_lease_with_absolute_expiry,
            claim::c2_first_claimed_at_is_set_once,
            claim::c2_excluded_indexes_are_not_claimed,
            claim::c2_ready_again_and_new_events_are_claimed_in_index_order,
            claim::c3_busy_reports_the_earliest_lease_expiry,
            claim::c3_busy_reports_the_retry_time,
            claim::c4_settled_when_pending_events_wait_behind_a_dead_letter,
            claim::c4_settled_when_every_ready_event_is_excluded,
            claim::c5_expired_lease_can_be_claimed_by_anyone,
            claim::c7_a_claim_names_when_the_next_waiting_event_comes_due,
            append_claim::ac2_claims_the_appended_events_that_are_ready,
            append_claim::ac2_limit_takes_the_first_ready_events,
            append_claim::ac1_bad_lease_writes_nothing,
            append_claim::ac3_retry_and_empty_batch_claim_nothing,
            append_claim::ac4_limit_zero_is_a_plain_append,
            append_claim::ac5_work_claimed_at_append_is_not_announced,
            renew::rn1_newer_attempt_is_superseded,
            renew::rn2_renew_moves_the_expiry,
            renew::rn2_expiry_in_the_past_is_not_renewed,
            renew::rn3_other_claims_are_in_neither_list,
            renew::rn3_lists_ascend,
            complete::co1_index_outside_the_log_is_invalid,
            complete::co2_completion_marks_processed_and_appends_returned_events,
            complete::co2_completion_lets_the_next_lane_event_become_ready,
            complete::co2_expired_lease_completes_while_no_newer_claim_exists,
            complete::co3_same_completion_again_returns_original_rows,
            complete::co4_processed_by_another_attempt_is_superseded,
            complete::co4_same_attempt_with_other_returned_ids_is_partial_duplicate,
            complete::co5_stale_failed_dead_or_unclaimed_attempt_is_superseded,
            complete::co6_returned_id_that_exists_is_partial_duplicate,
            complete::co6_returned_event_with_cause_is_invalid,
            complete::b1_batch_size_is_carried_by_the_cause,
            fail::f1_index_outside_the_log_is_invalid,
            fail::f2_processed_or_stale_attempt_is_superseded,
            fail::f3_dead_lettered_event_stays_dead_lettered,
            fail::f4_same_failure_again_keeps_the_count,
            fail::f5_never_claimed_is_superseded,
            fail::f6_failure_is_recorded_and_retried_at_once,
            fail::f6_retry_at_delays_the_next_claim,
            fail::f6_dead_letter_blocks_its_lane_only,
            release::rl1_release_ends_the_lease_at_once,
            release::rl1_only_this_holders_unexpired_leases_are_released,
            revive::rv1_index_outside_the_log_is_invalid,
            revive::rv2_revived_dead_letter_is_claimable_with_a_fresh_failure_count,
            revive::rv2_revive_unblocks_the_lane_in_order,
            revive::rv2_revive_lists_the_session_and_wakes_workers,
            revive::rv3_events_that_are_not_dead_lettered_are_refused,
            revive::rv3_reviving_twice_revives_once,
            races::rv3_racing_revives_of_one_dead_letter_revive_it_once,
            pending::ps1_pending_sessions_lists_sessions_with_pending_events,
            pending::ps1_pending_sessions_pages_in_byte_order,
            pending::ps2_wakeups_name_sessions_that_gain_work,
            pending::ps2_claimable_work_in_a_busy_session_and_releases_are_announced,
            state::s1_read_state_returns_snapshot_and_newer_events,
            state::s2_snapshot_never_moves_backward,
            state::s2_snapshot_beyond_the_frontier_is_invalid,
            presence::p1_last_writer_wins_by_sender_time,
            presence::p1_null_deletes_and_empty_values_apply_nothing,
            presence::p2_entries_expire_at_store_now_plus_ttl,
            presence::p3_read_returns_only_live_entries_in_order,
            presence::p4_subscribers_receive_patches_from_the_peer,
            presence::p4_patch_from_peer_right_after_subscribe_is_delivered,
            presence::x3_presence_times_are_exact_to_the_largest_exact_integer,
            lifecycle::ex1_a_session_expires_its_ttl_after_its_last_activity,
            lifecycle::ex1_expires_at_ends_the_session_whatever_its_activity,
            lifecycle::ex1_bad_expiries_are_invalid_and_write_nothing,
            lifecycle::ex2_set_expiry_replaces_or_removes_the_expiry,
            lifecycle::ex2_the_default_expiry_applies_to_new_sessions,
            lifecycle::ex3_an_expired_session_is_gone_and_starts_anew,
            lifecycle::ex3_a_session_found_expired_stays_gone_when_the_clock_moves_back,
            lifecycle::ex4_a_feed_of_an_expired_session_ends_with_session_expired,
            lifecycle::ex4_a_new_log_after_the_expiry_is_reported_as_expired,
            lifecycle::cl1_close_marks_the_session_closed_once,
            lifecycle::cl2_appends_to_a_closed_session_are_refused_but_replays_return_their_rows,
            lifecycle::cl3_pending_events_of_a_closed_session_still_settle,
            lifecycle::cl4_feeds_of_a_closed_session_deliver_everything_then_end_cleanly,
            lifecycle::cl5_clear_reopens_a_closed_session,
            lifecycle::cl6_an_append_that_closes_its_session_is_one_atomic_step,
            lifecycle::tr1_trim_removes_the_settled_prefix_and_keeps_later_indexes,
            lifecycle::tr1_a_large_trim_goes_ten_thousand_at_a_time,
            lifecycle::tr2_trimming_unsettled_events_or_beyond_the_frontier_is_refused,
            lifecycle::tr3_reads_before_the_trim_point_are_trimmed,
            lifecycle::tr3_read_state_needs_a_snapshot_at_or_after_the_trim_point,
            lifecycle::tr3_a_feed_behind_the_trim_point_ends_with_trimmed,
            lifecycle::tr4_replays_of_trimmed_batches_are_recognised_while_retained,
            lifecycle::tr5_trim_keeps_counters_and_snapshots,
            fork::fk1_a_fork_copies_the_prefix_and_goes_on_from_it,
            fork::fk1_racing_forks_onto_one_target_create_it_once,
            fork::fk2_a_fork_carries_processing_state_with_leases_released,
            fork::fk2_a_fork_releases_expired_leases_and_leaves_later_ones_to_the_source,
            fork::fk3_the_same_fork_again_writes_nothing_and_another_is_refused,
            fork::fk4_bad_forks_are_refused_and_write_nothing,
            fork::fk5_a_fork_and_its_source_are_independent,
            cancel::cn1_cancel_settles_a_pending_event_and_its_lane_moves_on,
            cancel::cn1_cancelling_a_dead_letter_unblocks_its_lane,
            cancel::cn2_a_cancelled_attempt_is_superseded_at_once,
            cancel::cn3_cancelling_a_settled_event_writes_nothing,
            cancel::cn4_bad_cancels_are_refused_and_write_nothing,
            cancel::cn5_cancels_of_leased_attempts_reach_other_instances,
            races::cn3_racing_cancels_and_a_completion_settle_an_event_once,
            delay::dl1_a_delayed_event_is_appended_at_once_and_claimable_at_its_due_time,
            delay::dl1_bad_delays_are_refused_and_a_past_not_before_is_ready_at_once,
            delay::dl2_a_delayed_lane_head_holds_its_lane,
            delay::dl3_delays_with_append_and_claim_completions_cancels_and_forks,
            feeds::st1_catch_up_then_live_exactly_once,
            feeds::st1_feed_keeps_up_with_concurrent_appends,
            feeds::st1_feeds_carry_each_events_lane_and_cause,
            feeds::st2_feed_sees_events_appended_by_the_peer,
            feeds::st3_many_feeds_on_one_session_all_get_everything,
            feeds::st4_unpolled_feed_yields_everything_afterwards,
            feeds::st5_close_ends_every_feed_with_store_closed,
            feeds::st5_new_stream_from_last_delivered_index_continues_exactly,
            feeds::st6_feed_of_a_cleared_session_ends_with_session_cleared,
            followers::st7_shared_reader_one_read_per_wake_up_whatever_the_followers,
            followers::st7_shared_reader_a_slow_follower_beside_fast_ones,
            followers::st7_shared_reader_followers_opened_and_dropped_during_appends,
            followers::st7_thousands_of_feeds_polled_from_one_task_all_deliver,
            inspection::i1_list_sessions_counts_match_the_log,
            inspection::i1_list_sessions_byte_order_prefix_and_pages,
            inspection::i2_read_events_freezes_the_frontier,
            inspection::i3_list_snapshots_by_reducer_name,
            inspection::i4_clear_deletes_the_session_entirely,
            races::a1_c6_racing_appends_get_indexes_1_to_1600,
            races::a4_racing_appends_of_one_id_are_per_session,
            races::c6_racing_claimers_never_share_an_attempt,
            races::ac2_c6_claims_at_append_and_racing_claimers_never_share_an_attempt,
            races::co2_f6_racing_complete_and_fail_exactly_one_wins,
            races::co4_racing_completions_of_one_attempt_exactly_one_wins,
            races::s1_read_state_is_one_consistent_read_under_appends,
            races::c6_co2_f6_concurrent_workers_drain_every_session,
            races::cl6_racing_appends_and_one_that_closes_agree_on_the_close,
            limits::a12_session_id_length,
            limits::a12_type_length,
            limits::a12_lane_length,
            limits::a12_event_id_length,
            limits::a12_batch_over_the_limit,
            limits::a12_payload_over_the_limit,
            limits::a12_default_limits,
            limits::a12_returned_events_obey_the_limits,
            limits::a12_limits_are_checked_before_duplicates,
            limits::c2_zero_limit_and_zero_ttl_are_invalid,
            limits::r2_i1_i2_ps1_zero_page_sizes_are_invalid,
            limits::f6_zero_max_failures_is_invalid,
            limits::s2_empty_reducer_name_is_invalid,
            limits::p1_empty_presence_names_and_zero_ttl_are_invalid,
            limits::c2_rn2_rl1_empty_holder_is_invalid,
            limits::s2_p1_names_over_1024_bytes_are_invalid,
            names::names_sessions_are_isolated_whatever_their_ids,
            names::names_lanes_are_isolated_within_and_across_sessions,
            names::names_reducers_are_isolated,
            names::names_presence_is_isolated,
            names::names_event_ids_are_isolated,
            names::names_list_prefix_is_literal,
            names::names_feeds_and_subscriptions_are_isolated,
            values::j1_values_nested_deeper_than_the_limit_are_invalid,
            values::j2_arbitrary_json_round_trips_exactly,
            values::x1_limits_above_the_maximum_count_as_the_maximum,
            values::x2_ttls_above_the_maximum_count_as_the_maximum,
            values::x1_indexes_at_the_top_of_u64_are_ordinary_input,
            values::x1_integer_extremes_get_the_memory_stores_answers,
        }
    };
}

/// Expands to one test per case of [`for_each_case!`], each opening its store
/// with `$setup`, plus `model_based_property` (the [`property`] test with
/// [`property::DEFAULT_CASES`] sequences, or as many as
/// `conformance!(setup, property_cases = n)` asks for: a store whose every
/// call is a network round trip may run fewer).
///
/// `$setup` is a path to an `async fn(StoreOptions) -> Stores`. Each case is
/// a `#[test]` that runs on a multi-threaded tokio runtime with two worker
/// threads (see [`run_case`]). Invoke it inside a module named after the store:
///
/// ```no_run
/// # use a2_conformance::a2_core::{MemoryStore, StoreOptions};
/// # async fn setup(options: StoreOptions) -> a2_conformance::Stores {
/// #     let store = std::sync::Arc::new(MemoryStore::new(options));
/// #     a2_conformance::Stores::new(store.clone(), store)
/// # }
/// mod memory {
///     a2_conformance::conformance!(super::setup);
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance {
    ($setup:path) => {
        $crate::conformance!($setup, property_cases = $crate::property::DEFAULT_CASES);
    };
    ($setup:path, property_cases = $cases:expr) => {
        fn __setup(
            options: $crate::a2_core::StoreOptions,
        ) -> $crate::futures::future::BoxFuture<'static, $crate::Stores> {
            ::std::boxed::Box::pin($setup(options))
        }

        $crate::for_each_case!($crate::__conformance_tests);

        #[test]
        fn model_based_property() {
            $crate::property::property_test(__setup, $cases);
        }
    };
}

/// Turns the case list of [`for_each_case!`] into tests; used by [`conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($($module:ident :: $case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::run_case($crate::cases::$module::$case(__setup));
            }
        )*
    };
}
