//! `complete_attempt` (CO1, CO2, CO3, CO4, CO5, CO6, B1): the decisions
//! are [`rules::complete`]'s.

use super::super::*;
use crate::rules::append::final_id;
use crate::rules::complete::Completion;

impl MemoryStore {
    pub(in crate::memory) fn complete_sync(
        &self,
        request: CompleteRequest,
    ) -> Result<CompleteOutcome> {
        let payloads = validate::encode_complete_request(&request, &self.inner.options.limits)?;
        let events = self.assign_ids(request.events)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        rules::delay::due_times(&events, now)?;
        let State {
            sessions,
            pending,
            feeds,
            ..
        } = &mut *guard;
        let index = request.index;
        // CO1.
        let session = super::worked_session(sessions, &request.session, index)?;
        let Some(record) = session.record(index) else {
            super::trimmed(session, &request.session, index)?;
            return Ok(CompleteOutcome::Superseded);
        };
        let returned = events.iter().map(final_id);
        match rules::complete::decide(&record, index, request.attempt, returned)? {
            Completion::Superseded => return Ok(CompleteOutcome::Superseded),
            Completion::Replay => {
                let mut rows = Vec::with_capacity(events.len());
                for id in record.returned_event_ids {
                    let row = session
                        .index_of(id)
                        .and_then(|i| session.stored(i))
                        .ok_or_else(|| {
                            Error::corrupted(
                                format!("returned id {id:?} is missing from the log"),
                                Some(&request.session),
                                Some(index),
                            )
                        })??;
                    rows.push(row);
                }
                return Ok(CompleteOutcome::Completed { events: rows });
            }
            Completion::Complete => {}
        }
        // CL3: a closed session settles its events but takes no new ones.
        if !events.is_empty() {
            rules::lifecycle::check_open(&request.session, session.closed.is_some())?;
        }
        rules::complete::check_new_ids(events.iter().map(final_id), |id| Ok(session.index_of(id)))?;
        let returned_ids = events.iter().map(|e| final_id(e).to_owned()).collect();
        session.complete(index, request.attempt, returned_ids, now);
        let cause = Cause {
            index,
            attempt: request.attempt,
            batch_size: request.batch_size,
        };
        let appended = !events.is_empty();
        let rows = write_events(session, events, &payloads, Some(cause), now);
        let _ = sync_pending(pending, session);
        let wake = if appended {
            FeedWake::of(feeds, session)
        } else {
            FeedWake::default()
        };
        drop(guard);
        wake.send();
        Ok(CompleteOutcome::Completed { events: rows })
    }
}
