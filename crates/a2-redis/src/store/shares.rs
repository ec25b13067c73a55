//! A page across the partitions, each asked for its share.
//!
//! Sessions hash evenly over the partitions, so a page of `n` sessions
//! takes about `n / partitions` from each. Asking every partition for `n`
//! (enough even if all of the page were in one) made each page cost
//! `partitions × n` session reads: listing 100 000 sessions went through
//! 4.8 M of them, 440 µs per listed session. Each partition is asked for
//! twice its even share instead. A partition that gave all it was asked for
//! may hold more, so nothing is known beyond the last id it gave; the page
//! is what every partition gave up to the smallest such id. When that is
//! short of the page, the partitions that set the limit are asked for twice
//! as much, until the page is full or no partition holds more.

use a2_core::Result;

/// What one partition gave for a page.
pub(super) struct Share<T> {
    /// What it gave that the client kept (a listing leaves out sessions
    /// cleared or expired meanwhile).
    pub items: Vec<T>,
    /// How many ids it went through: as many as it was asked for means
    /// it may hold more.
    pub seen: usize,
    /// The last of those ids.
    pub last: Option<String>,
}

/// How much each partition is first asked for, of a page of `want`.
fn first_quota(want: usize, partitions: usize) -> usize {
    (want.div_ceil(partitions.max(1)) * 2 + 8).min(want)
}

/// What a page needs next, given each partition's share and what it was
/// asked for.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The page is every item up to this id (`None`: every item given).
    Done(Option<String>),
    /// These partitions must be asked again (for twice as much).
    Ask(Vec<usize>),
}

fn next<T>(shares: &[Share<T>], quotas: &[usize], want: usize, id: impl Fn(&T) -> &str) -> Next {
    let full = |p: usize| shares[p].seen >= quotas[p];
    let bound = (0..shares.len())
        .filter(|&p| full(p))
        .filter_map(|p| shares[p].last.as_deref())
        .min();
    let Some(bound) = bound else {
        return Next::Done(None);
    };
    let known = shares
        .iter()
        .flat_map(|s| &s.items)
        .filter(|item| id(item).as_bytes() <= bound.as_bytes())
        .count();
    if known >= want {
        return Next::Done(Some(bound.to_owned()));
    }
    Next::Ask(
        (0..shares.len())
            .filter(|&p| full(p) && shares[p].last.as_deref() == Some(bound))
            .collect(),
    )
}

/// A page of at most `limit` items across `partitions`, in byte order of
/// their ids, and the cursor of the next page (its last id, when more
/// follow); `ask` fetches the shares of the given (partition, quota) pairs,
/// in their order.
pub(super) async fn page<T, F, Fut>(
    partitions: usize,
    limit: usize,
    id: impl Fn(&T) -> &str + Copy,
    mut ask: F,
) -> Result<(Vec<T>, Option<String>)>
where
    F: FnMut(Vec<(usize, usize)>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Share<T>>>>,
{
    // One more than the page, to know whether another follows.
    let want = limit + 1;
    let mut quotas = vec![first_quota(want, partitions); partitions];
    let mut shares: Vec<Share<T>> = Vec::with_capacity(partitions);
    let mut todo: Vec<usize> = (0..partitions).collect();
    loop {
        let got = ask(todo.iter().map(|&p| (p, quotas[p])).collect()).await?;
        if shares.is_empty() {
            shares = got;
        } else {
            for (&p, share) in todo.iter().zip(got) {
                shares[p] = share;
            }
        }
        match next(&shares, &quotas, want, id) {
            Next::Done(bound) => {
                let mut items: Vec<T> = shares
                    .into_iter()
                    .flat_map(|s| s.items)
                    .filter(|item| {
                        bound
                            .as_deref()
                            .is_none_or(|b| id(item).as_bytes() <= b.as_bytes())
                    })
                    .collect();
                items.sort_by(|a, b| id(a).as_bytes().cmp(id(b).as_bytes()));
                let cursor = if items.len() > limit {
                    items.truncate(limit);
                    items.last().map(|x| id(x).to_owned())
                } else {
                    None
                };
                return Ok((items, cursor));
            }
            Next::Ask(again) => {
                for &p in &again {
                    quotas[p] = quotas[p].saturating_mul(2);
                }
                todo = again;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partitions holding these sorted ids, asked the way `page` asks them.
    fn fetch(parts: &[Vec<&str>], asked: &[(usize, usize)]) -> Vec<Share<String>> {
        asked
            .iter()
            .map(|&(p, quota)| {
                let ids: Vec<String> = parts[p].iter().take(quota).map(|s| s.to_string()).collect();
                Share {
                    seen: ids.len(),
                    last: ids.last().cloned(),
                    items: ids,
                }
            })
            .collect()
    }

    fn run(parts: Vec<Vec<&str>>, limit: usize) -> (Vec<String>, Option<String>, usize) {
        let mut calls = 0;
        let (items, cursor) = futures::executor::block_on(page(
            parts.len(),
            limit,
            |s: &String| s.as_str(),
            |asked| {
                calls += 1;
                let shares = fetch(&parts, &asked);
                async move { Ok(shares) }
            },
        ))
        .unwrap();
        (items, cursor, calls)
    }

    #[test]
    fn an_even_spread_takes_one_round() {
        let ids: Vec<String> = (0..1000).map(|i| format!("s{i:04}")).collect();
        let mut parts: Vec<Vec<&str>> = vec![Vec::new(); 4];
        for (i, id) in ids.iter().enumerate() {
            parts[i % 4].push(id);
        }
        let (items, cursor, calls) = run(parts, 100);
        assert_eq!(calls, 1);
        assert_eq!(items, ids[..100]);
        assert_eq!(cursor.as_deref(), Some("s0099"), "more follow");
    }

    #[test]
    fn a_partition_holding_the_whole_page_is_asked_again_until_it_is_there() {
        let ids: Vec<String> = (0..500).map(|i| format!("s{i:04}")).collect();
        let mut parts: Vec<Vec<&str>> = vec![ids.iter().map(String::as_str).collect()];
        parts.extend([vec!["t1"], vec![], vec!["u1", "u2"]]);
        let (items, cursor, calls) = run(parts, 100);
        assert!(calls > 1, "the first quota cannot hold the page");
        assert_eq!(items, ids[..100]);
        assert_eq!(cursor.as_deref(), Some("s0099"));
    }

    #[test]
    fn every_item_is_given_when_the_partitions_run_out() {
        let parts = vec![vec!["a", "d"], vec!["b"], vec![], vec!["c", "e"]];
        let (items, cursor, _) = run(parts, 100);
        assert_eq!(items, ["a", "b", "c", "d", "e"]);
        assert_eq!(cursor, None, "the last page");
    }

    #[test]
    fn nothing_past_a_full_partition_s_last_id_is_given() {
        // The first quota of a 3-partition page of 4 is 4: partition 0 is
        // full at "d", so "e" of partition 1 is not known to be next.
        let shares = vec![
            Share {
                items: vec!["a", "b", "c", "d"],
                seen: 4,
                last: Some("d".into()),
            },
            Share {
                items: vec!["e"],
                seen: 1,
                last: Some("e".into()),
            },
        ];
        assert_eq!(
            next(&shares, &[4, 4], 4, |s| s),
            Next::Done(Some("d".into()))
        );
        assert_eq!(next(&shares, &[4, 4], 5, |s| s), Next::Ask(vec![0]));
    }
}
