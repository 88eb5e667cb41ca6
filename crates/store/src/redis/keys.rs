//! Every Redis key and channel name of one deployment, made in this one place from its
//! namespace, so that sweeps, takeovers, listings, the admin API and wake-ups can never
//! look outside it.
//!
//! With namespace `ns`: `mtg:ns:{<taskId>}`, `mtg:ns:owned:{<instance>}`,
//! `mtg:ns:by-principal:{<principal>}`, `mtg:ns:by-created`, `mtg:ns:lease:{<instance>}`,
//! `mtg:ns:instances`, `mtg:ns:handover:{<instance>}`, channels `mtg:ns:wake:<instance>`
//! and `mtg:ns:changes`.
//! The namespace sits outside the hash tag, so a Cluster still spreads tasks by id. The
//! unprefixed layout (no namespace, as before namespaces existed) is the same without
//! `ns:`.

use std::fmt;

/// Longest namespace accepted.
const MAX_LEN: usize = 64;

/// The second segments of the unprefixed layout. A namespace spelled like one would make
/// namespaced keys equal unprefixed ones (`mtg:owned:{x}` is both the unprefixed index
/// of instance `x` and task `x` of namespace `owned`), so they are refused.
const UNPREFIXED_SEGMENTS: [&str; 9] = [
    "owned",
    "by-principal",
    "by-created",
    "lease",
    "instances",
    "handover",
    "wake",
    "changes",
    "outbox",
];

/// Whose keys a gateway uses in a shared Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreNamespace {
    /// `mtg:<name>:…`: only gateways with the same name meet.
    Named(String),
    /// `mtg:…` as before namespaces existed; shared by every gateway that uses it.
    Unprefixed,
}

/// Why a namespace was refused. The messages say "legacy" for the unprefixed layout, as
/// the user's docs and the Helm chart do (tests/integration/namespaces.rs reads them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNamespace {
    #[error(
        "expected 1-{MAX_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-' (or \"\" for the legacy layout)"
    )]
    Characters,
    #[error("{0:?} is a word of the legacy key layout; choose another name")]
    Reserved(String),
}

impl StoreNamespace {
    /// A namespace as the operator wrote it; `""` selects the unprefixed layout. The
    /// characters allowed are never special in a `SCAN MATCH` pattern nor a hash tag.
    pub fn parse(raw: &str) -> Result<Self, BadNamespace> {
        if raw.is_empty() {
            return Ok(Self::Unprefixed);
        }
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
        if raw.len() > MAX_LEN || !raw.bytes().all(allowed) {
            return Err(BadNamespace::Characters);
        }
        // Keys are case-sensitive: only the exact words collide.
        if UNPREFIXED_SEGMENTS.contains(&raw) {
            return Err(BadNamespace::Reserved(raw.to_owned()));
        }
        Ok(Self::Named(raw.to_owned()))
    }

    /// The default: `u-` and 16 hex digits of SHA-256 over the upstream's canonical
    /// form, so replicas in front of one server share tasks and gateways in front of
    /// different servers never meet.
    pub fn derived_from(canonical_upstream: &str) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(canonical_upstream.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Self::Named(format!("u-{hex}"))
    }
}

/// The name as `--store-namespace` takes it (`""` for the unprefixed layout).
impl fmt::Display for StoreNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Named(name) => f.write_str(name),
            Self::Unprefixed => Ok(()),
        }
    }
}

/// The key and channel names of one namespace.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    /// `mtg:<ns>:` or, unprefixed, `mtg:`.
    prefix: String,
}

impl Keys {
    pub(super) fn new(namespace: &StoreNamespace) -> Self {
        let prefix = match namespace {
            StoreNamespace::Named(name) => format!("mtg:{name}:"),
            StoreNamespace::Unprefixed => "mtg:".to_owned(),
        };
        Self { prefix }
    }

    /// The task's hash; its id is the hash tag.
    pub(super) fn task(&self, task_id: &str) -> String {
        format!("{}{{{task_id}}}", self.prefix)
    }

    /// Where a new task is written before it is renamed onto its key (same hash tag, so
    /// the same slot). It exists only inside a `MULTI`.
    pub(super) fn task_staged(&self, task_id: &str) -> String {
        format!("{}{{{task_id}}}:new", self.prefix)
    }

    /// The principal is the caller's identity, not a gateway-made id: braces in it can
    /// only move the key to another slot, never make two principals share a key.
    pub(super) fn by_principal(&self, principal: &str) -> String {
        format!("{}by-principal:{{{principal}}}", self.prefix)
    }

    /// Every task's id by creation time, for operators' newest-first listing. One key:
    /// on a Cluster its slot takes one `ZADD` per task created.
    pub(super) fn by_created(&self) -> String {
        format!("{}by-created", self.prefix)
    }

    /// The ids of the unfinished tasks an instance runs.
    pub(super) fn owned(&self, instance: &str) -> String {
        format!("{}owned:{{{instance}}}", self.prefix)
    }

    pub(super) fn lease(&self, instance: &str) -> String {
        format!("{}lease:{{{instance}}}", self.prefix)
    }

    /// Set by an instance that stopped and left its tasks for others to take over.
    pub(super) fn handover(&self, instance: &str) -> String {
        format!("{}handover:{{{instance}}}", self.prefix)
    }

    /// The instances that own or owned a lease.
    pub(super) fn instances(&self) -> String {
        format!("{}instances", self.prefix)
    }

    /// The owner's wake-up channel.
    pub(super) fn wake(&self, instance: &str) -> String {
        format!("{}wake:{instance}", self.prefix)
    }

    /// The channel every instance hears task changes on.
    /// One part of a subscription's outbox (`due`, `queues`, `events`, `attempts`,
    /// `ages`, `dead`): `mtg:<ns>:outbox:<subscription>:<part>`. A subscription id is
    /// the gateway's (hex), never a client's text.
    pub(super) fn outbox(&self, subscription: &str, part: &str) -> String {
        format!("{}outbox:{subscription}:{part}", self.prefix)
    }

    pub(super) fn changes(&self) -> String {
        format!("{}changes", self.prefix)
    }

    /// `SCAN MATCH` pattern of the task keys: no other key of the namespace has `{`
    /// right after the prefix, and the prefix holds no glob character.
    pub(super) fn task_pattern(&self) -> String {
        format!("{}{{*", self.prefix)
    }

    /// The task id of a task key of this namespace.
    pub(super) fn task_id_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.prefix.as_str())?
            .strip_prefix('{')?
            .strip_suffix('}')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> Keys {
        Keys::new(&StoreNamespace::parse(name).unwrap())
    }

    #[test]
    fn every_name_lives_under_the_namespace_outside_the_hash_tag() {
        let keys = named("prod-a");
        assert_eq!(keys.task("t-1"), "mtg:prod-a:{t-1}");
        assert_eq!(keys.owned("gw-1"), "mtg:prod-a:owned:{gw-1}");
        assert_eq!(keys.by_principal("p"), "mtg:prod-a:by-principal:{p}");
        assert_eq!(keys.by_created(), "mtg:prod-a:by-created");
        assert_eq!(keys.lease("gw-1"), "mtg:prod-a:lease:{gw-1}");
        assert_eq!(keys.handover("gw-1"), "mtg:prod-a:handover:{gw-1}");
        assert_eq!(keys.instances(), "mtg:prod-a:instances");
        assert_eq!(keys.wake("gw-1"), "mtg:prod-a:wake:gw-1");
        assert_eq!(keys.changes(), "mtg:prod-a:changes");
        assert_eq!(keys.task_pattern(), "mtg:prod-a:{*");
        assert_eq!(keys.task_id_of("mtg:prod-a:{t-1}"), Some("t-1"));
    }

    #[test]
    fn the_unprefixed_layout_is_the_one_before_namespaces() {
        let keys = Keys::new(&StoreNamespace::Unprefixed);
        assert_eq!(keys.task("t-1"), "mtg:{t-1}");
        assert_eq!(keys.owned("gw-1"), "mtg:owned:{gw-1}");
        assert_eq!(keys.by_principal("p"), "mtg:by-principal:{p}");
        assert_eq!(keys.by_created(), "mtg:by-created");
        assert_eq!(keys.lease("gw-1"), "mtg:lease:{gw-1}");
        assert_eq!(keys.handover("gw-1"), "mtg:handover:{gw-1}");
        assert_eq!(keys.instances(), "mtg:instances");
        assert_eq!(keys.wake("gw-1"), "mtg:wake:gw-1");
        assert_eq!(keys.changes(), "mtg:changes");
        assert_eq!(keys.task_pattern(), "mtg:{*");
        assert_eq!(StoreNamespace::parse(""), Ok(StoreNamespace::Unprefixed));
    }

    #[test]
    fn a_namespace_sees_no_task_key_of_another_or_of_the_unprefixed_layout() {
        let (a, b, unprefixed) = (
            named("a"),
            named("b"),
            Keys::new(&StoreNamespace::Unprefixed),
        );
        assert_eq!(a.task_id_of(&b.task("t")), None);
        assert_eq!(a.task_id_of(&unprefixed.task("t")), None);
        assert_eq!(unprefixed.task_id_of(&a.task("t")), None);
        assert_eq!(a.task_id_of(&a.owned("t")), None);
        // A namespace that is a prefix of another does not see the other's keys.
        let longer = named("a.b");
        assert_eq!(a.task_id_of(&longer.task("t")), None);
    }

    #[test]
    fn only_plain_names_are_accepted() {
        for good in [
            "a",
            "prod",
            "team_1.gw-2",
            &"x".repeat(64),
            "Owned",
            "owned-2",
        ] {
            assert!(StoreNamespace::parse(good).is_ok(), "{good:?}");
        }
        for bad in [
            "a*",
            "a?",
            "[ab]",
            "a{b}",
            "a:b",
            "a b",
            "ä",
            "a\\b",
            &"x".repeat(65),
        ] {
            assert_eq!(
                StoreNamespace::parse(bad),
                Err(BadNamespace::Characters),
                "{bad:?}"
            );
        }
        for word in UNPREFIXED_SEGMENTS {
            assert!(
                matches!(StoreNamespace::parse(word), Err(BadNamespace::Reserved(_))),
                "{word:?}"
            );
        }
    }

    #[test]
    fn the_default_is_a_digest_of_the_upstream() {
        let one = StoreNamespace::derived_from("url http://mcp-a:8000/mcp");
        let again = StoreNamespace::derived_from("url http://mcp-a:8000/mcp");
        let other = StoreNamespace::derived_from("url http://mcp-b:8000/mcp");
        assert_eq!(one, again);
        assert_ne!(one, other);
        let name = one.to_string();
        assert!(name.starts_with("u-") && name.len() == 18, "{name}");
        // A derived name is a valid name.
        assert_eq!(StoreNamespace::parse(&name), Ok(one));
        assert_eq!(StoreNamespace::Unprefixed.to_string(), "");
    }
}
