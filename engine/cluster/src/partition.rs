//! Partitions: a fixed number of buckets keyed by the conversation id.
//!
//! A conversation belongs to partition `partition_of(id, P)` for the whole life of a
//! deployment: the owner of that partition serves it. The function is written down here,
//! bit for bit, because every node and every store (a `partition` column, a migration that
//! fills one) must compute the same answer forever. It never uses `RandomState` or any
//! per-process seed.
//!
//! **The hash:** 64-bit FNV-1a over the id's UTF-8 bytes (offset basis
//! `0xcbf29ce484222325`, prime `0x100000001b3`). **The reduction:** `hash % P`, the hash read
//! as an unsigned 64-bit number. FNV-1a mixes each byte in at the *low* end, so its low bits
//! are the well-mixed ones: `% P` spreads sequential ids (`c-1`, `c-2`, UUIDv7 suffixes)
//! evenly, where the high bits (a multiply-shift reduction) would not — the test
//! `sequential_ids_spread_evenly` caught exactly that in a first version. In SQL, with the
//! hash stored as a signed `bigint`: `((h::numeric + 2^64) % 2^64) % P`.

use std::fmt;

/// How many partitions a deployment has unless configured otherwise: about ten times the
/// most nodes one expects (Akka's rule of thumb for `number-of-shards`), small enough that
/// a lease table of this many rows is renewed cheaply. It is recorded with the store's
/// schema: changing it re-partitions every conversation and needs a migration with all
/// nodes stopped.
pub const PARTITIONS: u32 = 1024;

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// One partition, `0..P`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u32);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

/// 64-bit FNV-1a of `bytes`. Stable: pinned by the tests below.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The partition of a conversation among `partitions` (see the module docs for the exact
/// function). `partitions` must be at least 1.
pub fn partition_of(conversation_id: &str, partitions: u32) -> PartitionId {
    assert!(partitions > 0, "a deployment has at least one partition");
    let index = fnv1a64(conversation_id.as_bytes()) % u64::from(partitions);
    // Below `partitions`, a u32.
    PartitionId(index as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published FNV-1a 64 test vectors, so the hash itself cannot drift.
    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// Known partitions, computed independently (Python, the formula in the module docs).
    /// If this test fails, every deployment's conversations would move: don't "fix" the
    /// expected values.
    #[test]
    fn partition_of_is_pinned() {
        let pinned = [
            ("", 805, 5),
            ("a", 140, 12),
            ("foobar", 1000, 8),
            ("0190f8a3-5b7e-7c1a-9d2e-3f4a5b6c7d8e", 962, 2),
            ("c-1", 724, 4),
            ("conversation-42", 311, 7),
        ];
        for (id, of_1024, of_16) in pinned {
            assert_eq!(partition_of(id, PARTITIONS), PartitionId(of_1024), "{id:?}");
            assert_eq!(partition_of(id, 16), PartitionId(of_16), "{id:?}");
        }
        assert_eq!(partition_of("anything", 1), PartitionId(0));
    }

    /// Sequential ids (the worst case for FNV's low bits) spread evenly: every one of 1024
    /// partitions gets within ±40% of its fair share of 100k ids (a fair hash stays within
    /// about ±30%: the share is binomial with a standard deviation of 10 around 100).
    #[test]
    fn sequential_ids_spread_evenly() {
        for shape in [
            |i: u32| format!("c-{i}"),
            |i: u32| format!("0190f8a3-5b7e-7c1a-9d2e-{i:012x}"),
        ] {
            let mut counts = vec![0u32; PARTITIONS as usize];
            let ids = 100 * PARTITIONS;
            for i in 0..ids {
                counts[partition_of(&shape(i), PARTITIONS).0 as usize] += 1;
            }
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(
                counts.iter().all(|&count| (60..=140).contains(&count)),
                "{min:?}..{max:?}"
            );
        }
    }
}
