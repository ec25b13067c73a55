//! [`Texts`]: where a session keeps its events' ids and payload texts.
//!
//! Each event's id and payload text would otherwise be two allocations
//! kept for the life of the session, and kept allocations are the
//! allocator's slow path: they never come back to its per-thread caches,
//! so each one takes the arena lock and carves fresh memory (over a tenth
//! of the cycles of a single-event append, in a perf profile). A session's
//! log only grows and goes away whole, so its texts are packed one after
//! another into a few large chunks instead: no allocation per event, and
//! no per-allocation header or rounding. A trim (TR1) drops the chunks
//! before the first retained event's text, so the memory of trimmed
//! events goes back a chunk at a time.

use std::collections::VecDeque;

/// Texts packed into chunks that are never moved or reallocated.
#[derive(Debug, Default)]
pub(super) struct Texts {
    chunks: VecDeque<String>,
    /// How many chunks were dropped from the front: chunk `n` of a
    /// [`TextRef`] is `chunks[n - dropped]`.
    dropped: usize,
}

/// Where [`Texts::push`] put an id and its payload text.
#[derive(Debug, Clone, Copy)]
pub(super) struct TextRef {
    chunk: usize,
    start: usize,
    id_end: usize,
    end: usize,
}

impl Texts {
    /// The first chunk's capacity: a session of a few events stays small.
    const FIRST_CHUNK: usize = 256;
    /// Chunks double up to this capacity; a larger text gets a chunk of
    /// its own size.
    const MAX_CHUNK: usize = 1 << 20;

    /// Keeps `id` followed by `payload`.
    pub(super) fn push(&mut self, id: &str, payload: &str) -> TextRef {
        let len = id.len() + payload.len();
        let fits = self
            .chunks
            .back()
            .is_some_and(|chunk| chunk.capacity() - chunk.len() >= len);
        if !fits {
            let next = self.chunks.back().map_or(Self::FIRST_CHUNK, |chunk| {
                (chunk.capacity() * 2).min(Self::MAX_CHUNK)
            });
            self.chunks.push_back(String::with_capacity(next.max(len)));
        }
        let last = self.chunks.len() - 1;
        let chunk = self.dropped + last;
        // `fits`, or the new chunk's capacity, leaves room: a chunk is
        // never reallocated, so no kept text is ever copied again.
        let text = &mut self.chunks[last];
        let start = text.len();
        text.push_str(id);
        text.push_str(payload);
        TextRef {
            chunk,
            start,
            id_end: start + id.len(),
            end: text.len(),
        }
    }

    fn get(&self, chunk: usize, start: usize, end: usize) -> &str {
        // A `TextRef` comes from `push` on these very texts, which only
        // grow, so it always names a text; the empty default never shows.
        chunk
            .checked_sub(self.dropped)
            .and_then(|chunk| self.chunks.get(chunk))
            .and_then(|text| text.get(start..end))
            .unwrap_or_default()
    }

    /// Drops the chunks before the one holding `at`: every text kept there
    /// belongs to an event before `at`'s (texts are kept in index order).
    pub(super) fn forget_before(&mut self, at: TextRef) {
        while self.dropped < at.chunk && self.chunks.pop_front().is_some() {
            self.dropped += 1;
        }
    }

    /// Drops every chunk but the last, which the next text may still fit.
    pub(super) fn forget_all(&mut self) {
        while self.chunks.len() > 1 && self.chunks.pop_front().is_some() {
            self.dropped += 1;
        }
    }

    /// The id kept at `at`.
    pub(super) fn id(&self, at: TextRef) -> &str {
        self.get(at.chunk, at.start, at.id_end)
    }

    /// The payload text kept at `at`.
    pub(super) fn payload(&self, at: TextRef) -> &str {
        self.get(at.chunk, at.id_end, at.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_read_back_across_chunks_of_every_size() {
        let mut texts = Texts::default();
        let big = "x".repeat(Texts::MAX_CHUNK + 10);
        let mut kept = Vec::new();
        for n in 0..5_000 {
            let payload = if n == 2_500 {
                big.clone()
            } else {
                format!("{{\"n\":{n}}}")
            };
            let id = format!("id-{n}-é");
            kept.push((texts.push(&id, &payload), id, payload));
        }
        assert!(texts.chunks.len() > 2);
        for (at, id, payload) in &kept {
            assert_eq!(texts.id(*at), id);
            assert_eq!(texts.payload(*at), payload);
        }
        // Forgetting the texts before one keeps it and every later one.
        let (at, _, _) = kept[3_000];
        let chunks = texts.chunks.len();
        texts.forget_before(at);
        assert!(texts.chunks.len() < chunks);
        for (at, id, payload) in &kept[3_000..] {
            assert_eq!(texts.id(*at), id);
            assert_eq!(texts.payload(*at), payload);
        }
        let more = texts.push("late", "{}");
        assert_eq!((texts.id(more), texts.payload(more)), ("late", "{}"));
    }
}
