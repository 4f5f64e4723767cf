-- Cluster layout: applies one user's outbox entries (app-scope writes recorded in the
-- user's slot) to the app's slot. Safe to run twice, concurrently, or after a crash: each
-- entry is applied at most once and in order per user (KEYS[4] keeps how far), and an
-- app field takes a value only if its version is newer than the one it holds, so writes of
-- different users meet in the same order whoever applies them, whenever.
-- A version is the entry's outbox id (the user's shard's clock, in ms, then a sequence),
-- zero-padded so that versions compare as strings, then the user: "<ms>-<seq>:<user>".
-- uses: _permitted, _expiry
-- KEYS[1] app_state: the app state hash
-- KEYS[2] app_versions: the app versions hash
-- KEYS[3] app_sessions: the app's sessions zset
-- KEYS[4] app_applied: the app applied hash (user -> last outbox id applied)
-- KEYS[5] app_expiry: the app's expiry index (_expiry.lua), scored on a cluster by when to
--   check a session: when a create's TTL would end it, later when it was found alive then
--   (prune_index.lua)
-- ARGV[1] user_member: the user's field in KEYS[4] (escaped user id)
-- ARGV[2] want_state: '1' to return the app state
-- ARGV[3] now_ms: the caller's clock, whole ms since the epoch
-- ARGV[4] expiry_take: how many due members of the expiry index to claim and return (0:
--   none)
-- ARGV[5]... entries: the entries, oldest first: id, number of fields, then that many
--   name/value pairs; names: 'app:<field>' -> JSON, 'index_add' -> member (then 'score' ->
--   score, and for a session that expires 'expire' -> ms; without it the member leaves the
--   expiry index), 'index_rem' -> member (out of both indexes), 'index_expire' -> member
--   (then 'expire' -> ms: its new time in the expiry index, if it is there)
-- returns {last id applied ('' = none yet), app state as field/value list (ARGV[2] = '1'),
--         how many of the entries this call applied (the others were applied before),
--         the expiry index's due members this call claimed (see expiry_due in _expiry.lua)},
--         {-3, key, found type} when a key has a foreign type, {-4, command, key} when the
--         ACL user may not run a command it needs (nothing written either way)
local refused = denied_each('TYPE', KEYS)
  or denied('HGET', KEYS[2], 'HGET', KEYS[4], 'HSET', KEYS[1], 'HSET', KEYS[2], 'HSET', KEYS[4],
    'ZADD', KEYS[3], 'ZREM', KEYS[3], 'HGETALL', KEYS[1], 'ZADD', KEYS[5], 'ZREM', KEYS[5],
    'ZRANGE', KEYS[5])
if refused then return refused end

local expected = {'hash', 'hash', 'zset', 'hash', 'zset'}
for i, want in ipairs(expected) do
  local t = redis.call('TYPE', KEYS[i])
  if type(t) == 'table' then t = t['ok'] end
  if t ~= 'none' and t ~= want then return {-3, KEYS[i], t} end
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function newer(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams > bms or (ams == bms and aseq > bseq)
end

local applied = redis.call('HGET', KEYS[4], ARGV[1]) or '0-0'
local count = 0
-- The value of field `name` of the entry whose fields start at ARGV[from], false if none.
local function named(from, n, name)
  for k = from, from + 2 * n - 2, 2 do
    if ARGV[k] == name then return ARGV[k + 1] end
  end
  return false
end
local pos = 5
while pos <= #ARGV do
  local id, n = ARGV[pos], tonumber(ARGV[pos + 1])
  if newer(id, applied) then
    local ms, seq = parse(id)
    local version = string.format('%015d-%010d:', ms, seq) .. ARGV[1]
    for j = pos + 2, pos + 2 * n, 2 do
      local name, value = ARGV[j], ARGV[j + 1]
      if name == 'index_add' then
        redis.call('ZADD', KEYS[3], named(pos + 2, n, 'score') or 0, value)
        -- A session that had this id before must not be taken for this one.
        local expire = named(pos + 2, n, 'expire')
        if expire then
          redis.call('ZADD', KEYS[5], expire, value)
        else
          redis.call('ZREM', KEYS[5], value)
        end
      elseif name == 'index_rem' then
        redis.call('ZREM', KEYS[3], value)
        redis.call('ZREM', KEYS[5], value)
      elseif name == 'index_expire' then
        redis.call('ZADD', KEYS[5], 'XX', named(pos + 2, n, 'expire'), value)
      elseif string.sub(name, 1, 4) == 'app:' then
        local field = string.sub(name, 5)
        local current = redis.call('HGET', KEYS[2], field)
        if not current or version > current then
          redis.call('HSET', KEYS[1], field, value)
          redis.call('HSET', KEYS[2], field, version)
        end
      end
    end
    applied = id
    count = count + 1
  end
  pos = pos + 2 + 2 * n
end
if applied ~= '0-0' then redis.call('HSET', KEYS[4], ARGV[1], applied) end
local due = expiry_due(KEYS[5], ARGV[3], tonumber(ARGV[4]))
if ARGV[2] == '1' then return {applied, redis.call('HGETALL', KEYS[1]), count, due} end
return {applied, {}, count, due}
