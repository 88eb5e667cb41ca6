//! A `SCAN`/`SSCAN` walk that can stop after any entry, so an admin page holds at most
//! `limit` tasks although one Redis step returns as many entries as it likes (`COUNT` is
//! a hint; a small set answers whole).
//!
//! A step from cursor `s` returns entries and cursor `e`: the buckets `[s, e)`. Its
//! entries are handed out in id order, and each carries the position right after it:
//! `(s, count, e, id)`, "of the buckets `[s, e)`, the ids up to `id` are out". Resuming
//! there reads `[s, e)` again and hands out the ids above `id`. That is exact whatever
//! came or went meanwhile: an id that is new in those buckets was created during the
//! walk (it may or may not be seen), and one that went is not handed out. Counting
//! entries instead ("the first k were out") would skip or repeat one as soon as a bucket
//! gained or lost an entry, since the reply's order is the buckets' order.
//!
//! Reading `[s, e)` again with the same `COUNT` ends at `e` unless entries came or went
//! in those buckets (Redis stops a step once it holds `COUNT` entries). Then the region
//! is read to `e` in more calls: one that ends before `e` stays inside; one that ends
//! past `e` is read again bucket by bucket (`COUNT 1` returns the entries of the one
//! bucket it stopped at), so each entry is known to lie inside `[s, e)` or past it, and
//! the ones past it are new to the walk. Cursors are compared in Redis' scan order, the
//! reverse-binary order of `dictScan`, which a table that grows keeps (a bucket's halves
//! follow it in that order); when the table shrinks between two pages an entry may be
//! handed out twice, as `SCAN` itself may return one twice.

use std::fmt;
use std::future::Future;

use super::is_task_id;
use crate::StoreError;
use crate::inspect::{BadCursor, InspectError};

/// Largest `COUNT` a cursor may carry: the admin API asks for at most 1,000 a step.
const MAX_COUNT: u64 = 1000;

/// Where a walk stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Position {
    /// At a cursor Redis returned (0: the start); nothing from it on is out yet.
    At(u64),
    /// Within a step: of the buckets `[start, end)`, read with `COUNT count`, the ids up
    /// to `after` are out.
    Within {
        start: u64,
        count: u64,
        end: u64,
        after: String,
    },
}

/// One step of a walk: entries in the order to hand them out, each with the position
/// right after it, and where the walk goes on (`None`: at its end).
#[derive(Debug, Default)]
pub(super) struct Step {
    pub(super) entries: Vec<(String, Position)>,
    pub(super) next: Option<Position>,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::At(cursor) => write!(f, "{cursor}"),
            Self::Within {
                start,
                count,
                end,
                after,
            } => write!(f, "{start}/{count}/{end}/{after}"),
        }
    }
}

impl Position {
    pub(super) fn parse(text: &str) -> Result<Self, BadCursor> {
        let bad = || BadCursor(text.to_owned());
        let number = |part: &str| part.parse::<u64>().map_err(|_| bad());
        let parts: Vec<&str> = text.split('/').collect();
        match parts[..] {
            [cursor] => Ok(Self::At(number(cursor)?)),
            [start, count, end, after] => {
                let count = number(count)?;
                if !(1..=MAX_COUNT).contains(&count) || !is_task_id(after) {
                    return Err(bad());
                }
                Ok(Self::Within {
                    start: number(start)?,
                    count,
                    end: number(end)?,
                    after: after.to_owned(),
                })
            }
            _ => Err(bad()),
        }
    }
}

/// One `SCAN`-family command over one keyspace or set.
pub(super) trait Scan {
    /// One call from `cursor`: the next cursor (0: the end) and the entries' task ids.
    fn scan(
        &self,
        cursor: u64,
        count: u64,
    ) -> impl Future<Output = Result<(u64, Vec<String>), StoreError>> + Send;
}

/// `cursor`'s place in the scan order; 0 as a returned cursor is the end.
fn rank(cursor: u64) -> u128 {
    if cursor == 0 {
        u128::from(u64::MAX) + 1
    } else {
        u128::from(cursor.reverse_bits())
    }
}

/// One step of `scan` from `from`, asking for about `count` entries.
pub(super) async fn step(
    scan: &impl Scan,
    from: &Position,
    count: u64,
) -> Result<Step, InspectError> {
    let count = count.clamp(1, MAX_COUNT);
    match from {
        Position::At(start) => {
            let (end, ids) = scan.scan(*start, count).await?;
            Ok(region(*start, count, end, ids, None))
        }
        Position::Within {
            start,
            count,
            end,
            after,
        } => reread(scan, *start, *count, *end, after).await,
    }
}

/// The entries of `[start, end)` above `after` (all with `None`), in id order.
fn region(start: u64, count: u64, end: u64, mut ids: Vec<String>, after: Option<&str>) -> Step {
    ids.sort_unstable();
    ids.dedup();
    let entries = ids
        .into_iter()
        .filter(|id| after.is_none_or(|after| id.as_str() > after))
        .map(|id| {
            let position = Position::Within {
                start,
                count,
                end,
                after: id.clone(),
            };
            (id, position)
        })
        .collect();
    Step {
        entries,
        next: (end != 0).then_some(Position::At(end)),
    }
}

/// Reads `[start, end)` again (see the module's comment) and hands out what is above
/// `after`, then what a call found past `end`.
async fn reread(
    scan: &impl Scan,
    start: u64,
    count: u64,
    end: u64,
    after: &str,
) -> Result<Step, InspectError> {
    // A cursor the gateway made needs about one call per entry of its step at most, and
    // after the first call (which reads what the step read) finds few entries more; a
    // made-up one must not walk (or hold) the whole keyspace.
    let max_calls = 4 * count + 16;
    let max_more = 16 * count as usize + 1024;
    let mut inside = Vec::new();
    let mut first = None;
    let mut at = start;
    let mut step_count = count;
    let mut calls = 0;
    let past = loop {
        calls += 1;
        let more = first.map_or(0, |first| inside.len() - first);
        if calls > max_calls || more > max_more {
            return Err(BadCursor(
                Position::Within {
                    start,
                    count,
                    end,
                    after: after.to_owned(),
                }
                .to_string(),
            )
            .into());
        }
        let (next, ids) = scan.scan(at, step_count).await?;
        if rank(next) <= rank(end) {
            inside.extend(ids);
            first.get_or_insert(inside.len());
            at = next;
            if next == end {
                break None;
            }
        } else if step_count > 1 {
            // Straddles `end`: which entries lie before it is known only bucket by bucket.
            step_count = 1;
        } else {
            // One bucket, at or past `end`: all of it is new to the walk.
            break Some((next, ids));
        }
    };
    let mut step = region(start, count, end, inside, Some(after));
    if let Some((next, ids)) = past {
        let beyond = region(end, 1, next, ids, None);
        step.entries.extend(beyond.entries);
        step.next = beyond.next;
    }
    Ok(step)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A keyspace of `2^bits` buckets walked like `dictScan`: reverse-binary cursor,
    /// whole buckets, a step ending once it holds `count` entries.
    struct Table {
        bits: u32,
        buckets: Mutex<BTreeMap<u64, Vec<String>>>,
        single_bucket_calls: AtomicUsize,
    }

    impl Table {
        fn new(bits: u32) -> Self {
            Self {
                bits,
                buckets: Mutex::default(),
                single_bucket_calls: AtomicUsize::new(0),
            }
        }

        fn insert(&self, bucket: u64, id: &str) {
            let mut buckets = self.buckets.lock().unwrap();
            buckets.entry(bucket).or_default().push(id.to_owned());
        }

        fn remove(&self, id: &str) {
            for ids in self.buckets.lock().unwrap().values_mut() {
                ids.retain(|i| i != id);
            }
        }

        fn scan_now(&self, mut cursor: u64, count: u64) -> (u64, Vec<String>) {
            if count == 1 {
                self.single_bucket_calls.fetch_add(1, Ordering::Relaxed);
            }
            let mask = (1u64 << self.bits) - 1;
            let buckets = self.buckets.lock().unwrap();
            let mut out = Vec::new();
            let mut iterations = count * 10;
            loop {
                out.extend(buckets.get(&(cursor & mask)).cloned().unwrap_or_default());
                // dict.c: v |= ~m0; v = rev(v); v++; v = rev(v);
                cursor = ((cursor | !mask).reverse_bits().wrapping_add(1)).reverse_bits();
                iterations -= 1;
                if cursor == 0 || iterations == 0 || out.len() as u64 >= count {
                    return (cursor, out);
                }
            }
        }
    }

    impl Scan for Table {
        async fn scan(&self, cursor: u64, count: u64) -> Result<(u64, Vec<String>), StoreError> {
            Ok(self.scan_now(cursor, count))
        }
    }

    fn id(n: u32) -> String {
        format!("00000000-0000-0000-0000-{n:012}")
    }

    /// Pages of at most `limit` entries from the start; every entry handed out.
    async fn walk(table: &Table, limit: usize, between: impl Fn(usize)) -> Vec<String> {
        let mut out = Vec::new();
        let mut from = Position::At(0);
        for page in 0.. {
            between(page);
            let step = step(table, &from, limit as u64).await.unwrap();
            let taken = step.entries.len().min(limit);
            out.extend(step.entries[..taken].iter().map(|(id, _)| id.clone()));
            from = match (taken < step.entries.len(), step.next) {
                (true, _) => Position::parse(&step.entries[taken - 1].1.to_string()).unwrap(),
                (false, Some(next)) => next,
                (false, None) => return out,
            };
            assert!(page < 10_000, "the walk does not end");
        }
        unreachable!()
    }

    fn filled(bits: u32, n: u32) -> Table {
        let table = Table::new(bits);
        for i in 0..n {
            // Uneven buckets: chains of up to 4.
            table.insert(
                u64::from(i * 7 % (1 << bits)) / (1 + u64::from(i % 4)),
                &id(i),
            );
        }
        table
    }

    #[tokio::test]
    async fn pages_hold_each_entry_once_however_steps_overflow() {
        for (bits, n) in [(2, 7), (4, 50), (8, 1000)] {
            for limit in [1, 2, 3, 100] {
                let table = filled(bits, n);
                let mut seen = walk(&table, limit, |_| {}).await;
                seen.sort();
                let mut all: Vec<String> = (0..n).map(id).collect();
                all.sort();
                assert_eq!(seen, all, "{n} entries in pages of {limit}");
            }
        }
    }

    /// Entries come and go between pages, in buckets already walked, being walked and
    /// not yet walked: each entry that stays is handed out exactly once, none twice.
    #[tokio::test]
    async fn entries_that_stay_are_handed_out_once_while_others_come_and_go() {
        for limit in [1, 2, 5] {
            let table = filled(6, 120);
            let churn = |page: usize| {
                let page = page as u32;
                table.insert(u64::from(page * 5 % 64), &id(1000 + page));
                if page >= 3 {
                    table.remove(&id(1000 + page - 3));
                }
            };
            let seen = walk(&table, limit, churn).await;
            for entry in (0..120).map(id) {
                let times = seen.iter().filter(|s| **s == entry).count();
                assert_eq!(
                    times, 1,
                    "{entry} handed out {times} times (pages of {limit})"
                );
            }
            let mut unique = seen.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), seen.len(), "an entry handed out twice");
        }
    }

    fn ids_of(step: &Step) -> Vec<String> {
        step.entries.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Buckets in scan order for 3 bits: 0, 4, 2, 6, 1, 5, 3, 7.
    #[tokio::test]
    async fn a_step_that_lost_entries_is_read_again_to_its_old_end() {
        let table = Table::new(3);
        table.insert(0, &id(5));
        table.insert(0, &id(6));
        table.insert(4, &id(3));
        table.insert(2, &id(4));
        let first = step(&table, &Position::At(0), 2).await.unwrap();
        assert_eq!(ids_of(&first), [id(5), id(6)]);
        // The page ends after the first; the second goes before the next page.
        table.remove(&id(6));
        let resumed = step(&table, &first.entries[0].1, 2).await.unwrap();
        // Read with COUNT 2, the step now reaches into bucket 4 (past its old end), so
        // it is read again bucket by bucket: bucket 4 is left for the next step. (Taken
        // whole, its id 3, below the cut at 5, would be lost.)
        assert_eq!(table.single_bucket_calls.load(Ordering::Relaxed), 1);
        assert!(resumed.entries.is_empty(), "{:?}", resumed.entries);
        assert_eq!(resumed.next, Some(Position::At(4)));
        let rest = step(&table, &Position::At(4), 2).await.unwrap();
        assert_eq!(ids_of(&rest), [id(3), id(4)]);
    }

    #[tokio::test]
    async fn entries_found_past_a_steps_old_end_are_handed_out_once() {
        let table = Table::new(3);
        table.insert(4, &id(1));
        table.insert(4, &id(2));
        table.insert(2, &id(3));
        table.insert(6, &id(4));
        let first = step(&table, &Position::At(4), 2).await.unwrap();
        assert_eq!(ids_of(&first), [id(1), id(2)]);
        assert_eq!(first.next, Some(Position::At(2)));
        table.remove(&id(1));
        table.remove(&id(2));
        let resumed = step(&table, &first.entries[0].1, 2).await.unwrap();
        // Bucket 2 lies past the old end (2): its entry is new to the walk.
        assert_eq!(ids_of(&resumed), [id(3)]);
        assert_eq!(resumed.next, Some(Position::At(6)));
        // Stopping after it and going on again hands it out no more.
        let again = step(&table, &resumed.entries[0].1, 2).await.unwrap();
        assert!(again.entries.is_empty(), "{:?}", again.entries);
        assert_eq!(again.next, Some(Position::At(6)));
        let rest = step(&table, &Position::At(6), 2).await.unwrap();
        assert_eq!(ids_of(&rest), [id(4)]);
    }

    /// A made-up position whose region is the whole table is refused, not walked.
    #[tokio::test]
    async fn a_made_up_region_is_refused_rather_than_walked() {
        let table = filled(12, 5000);
        let made_up = Position::Within {
            start: 0,
            count: 1,
            end: 0,
            after: id(0),
        };
        let refused = step(&table, &made_up, 1).await;
        assert!(
            matches!(refused, Err(InspectError::BadCursor(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn positions_read_back_and_bad_ones_are_refused() {
        let within = Position::Within {
            start: 12,
            count: 3,
            end: 40,
            after: id(7),
        };
        assert_eq!(Position::parse(&within.to_string()).unwrap(), within);
        assert_eq!(Position::parse("0").unwrap(), Position::At(0));
        for bad in [
            "",
            "x",
            "1/2/3",
            "1/0/3/00000000-0000-0000-0000-000000000007",
            "1/1001/3/00000000-0000-0000-0000-000000000007",
            "1/2/3/not-an-id",
            "1/2/3/00000000-0000-0000-0000-000000000007/5",
            "-1",
        ] {
            assert!(Position::parse(bad).is_err(), "{bad:?}");
        }
    }
}
