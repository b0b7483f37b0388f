//! The Lua scripts of the Redis store's writes: each runs atomically, in one order for every
//! node (see the parent module's docs). Their KEYS and ARGV are documented with each.

/// Applies a commit (see the parent module's docs). KEYS: conversation hash, log stream, wake
/// set, inbox sequence hash, one inbox stream per delivery, one party set per party (creation
/// only), one message key per message delivered to several agents, the shared-message count
/// hash, and last the id index (creation adds the id). ARGV: id, expected version, new version,
/// wake-up or '', channel, notice or '', event count, delivery count, party count, parties
/// JSON, the events as one JSON array, the shared message count, (JSON, receiver count) per
/// shared message, then (agent, message JSON or '', shared message number or 0) per delivery.
/// Returns {1} done, {2, v} duplicate, {3, v} conflict.
///
/// A message for one agent is written into its inbox entry (field `m`); a message for
/// several is written once, under its own key, and their entries name that key (field `r`);
/// the count hash says how many entries name it, for [`ACK_SCRIPT`].
///
/// The log gets one entry per commit, its id the commit's last seq and its field `b` the
/// events (one XADD, not one per event). Logs written before kept one entry per event,
/// field `e`; readers take both.
pub(super) const COMMIT_SCRIPT: &str = r#"
local conv, log, wake, heads = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local expected = tonumber(ARGV[2])
local current = redis.call('HGET', conv, 'version')
if expected == 0 then
  if current then return {2, tonumber(current)} end
else
  local actual = 0
  if current then actual = tonumber(current) end
  if actual ~= expected then return {3, actual} end
end
local n_events, n_deliveries, n_parties = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
redis.call('HSET', conv, 'version', ARGV[3])
if expected == 0 then
  redis.call('HSET', conv, 'parties', ARGV[10])
  redis.call('ZADD', KEYS[#KEYS], 0, id)
end
if n_events > 0 then
  redis.call('XADD', log, string.format('%d-0', expected + n_events), 'b', ARGV[11])
end
if ARGV[4] == '' then
  redis.call('ZREM', wake, id)
else
  redis.call('ZADD', wake, ARGV[4], id)
end
local n_shared = tonumber(ARGV[12])
local shared_keys = 4 + n_deliveries + n_parties
local refs = KEYS[shared_keys + n_shared + 1]
for s = 1, n_shared do
  redis.call('SET', KEYS[shared_keys + s], ARGV[11 + 2 * s])
  redis.call('HSET', refs, KEYS[shared_keys + s], ARGV[12 + 2 * s])
end
local a = 13 + 2 * n_shared
for j = 1, n_deliveries do
  local seq = redis.call('HINCRBY', heads, ARGV[a], 1)
  local entry = string.format('%d-0', seq)
  local shared = tonumber(ARGV[a + 2])
  if shared == 0 then
    redis.call('XADD', KEYS[4 + j], entry, 'c', id, 'm', ARGV[a + 1])
  else
    redis.call('XADD', KEYS[4 + j], entry, 'c', id, 'r', KEYS[shared_keys + shared])
  end
  a = a + 3
end
for k = 1, n_parties do
  redis.call('SADD', KEYS[4 + n_deliveries + k], id)
end
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
return {1}
"#;

/// Leases up to `ARGV[2]` members of the wake set `KEYS[1]` due at `ARGV[1]` by moving them to
/// `ARGV[3]`; returns their ids.
pub(super) const CLAIM_SCRIPT: &str = r#"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[3], id) end
return due
"#;

/// Deletes up to `ARGV[2]` entries of the inbox stream `KEYS[1]` numbered `ARGV[1]` or lower, and
/// each shared message none names any more (`KEYS[2]`: the shared-message count hash; a key
/// written before the counts were kept has none and is left alone). Returns how many
/// entries it deleted: the caller repeats until fewer than `ARGV[2]`, so one script never
/// holds Redis for long.
pub(super) const ACK_SCRIPT: &str = r#"
local entries = redis.call('XRANGE', KEYS[1], '-', ARGV[1] .. '-0', 'COUNT', tonumber(ARGV[2]))
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'r' then
      local key = fields[i + 1]
      if redis.call('HEXISTS', KEYS[2], key) == 1
          and redis.call('HINCRBY', KEYS[2], key, -1) <= 0 then
        redis.call('HDEL', KEYS[2], key)
        redis.call('DEL', key)
      end
    end
  end
  redis.call('XDEL', KEYS[1], entry[1])
end
return #entries
"#;

/// Takes the lead of a role (`KEYS[1]`) for node `ARGV[1]` for `ARGV[2]` ms when nobody holds it,
/// or extends it when the node holds it already; 1 when the node leads, 0 when another does.
pub(super) const LEAD_SCRIPT: &str = r#"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"#;

/// Moves agent `ARGV[1]`'s webhook cursor in hash `KEYS[1]` to `ARGV[2]` unless it is
/// further already (a node that has just lost the lead may still report an older one).
pub(super) const WEBHOOK_CURSOR_SCRIPT: &str = r#"
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"#;

/// Deletes a conversation: KEYS hash, log, wake set, id index; ARGV id, party-set key prefix.
pub(super) const REMOVE_SCRIPT: &str = r#"
local parties = redis.call('HGET', KEYS[1], 'parties')
if parties then
  for _, agent in ipairs(cjson.decode(parties)) do
    redis.call('SREM', ARGV[2] .. agent, ARGV[1])
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
"#;
