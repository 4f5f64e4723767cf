#!lua flags=no-writes
-- Reads one session at one instant: metadata, the state hashes and a range of its events.
-- The cluster layout's fallback when optimistic pipelined reads keep racing with writers:
-- read-only, and a script rather than MULTI, which redis-py's cluster client runs slowly.
-- (Lua copies every entry into tables and back: ~2.5x a pipeline for 1,000 events.)
-- uses: _permitted, _layout
-- KEYS[1] meta: the session's metadata hash
-- KEYS[2] state: the session state hash
-- KEYS[3] user_state: the user state hash
-- KEYS[4] events: the events stream
-- KEYS[5] app_state: the app state hash, or (cluster layout) the user's app outbox stream
-- KEYS[6] event_ids: the event ids hash: whether it exists (with the stream, what shows keys
--   evicted apart); a read that brings a copy up to date also checks its newest event there
-- ARGV[1] range: 'all' (XRANGE from ARGV[2]), 'recent' (the newest ARGV[3] events from
--   ARGV[2] on) or 'none' (no events)
-- ARGV[2] start: the first stream id ('-' = from the start)
-- ARGV[3] recent_count: how many events for 'recent'
-- ARGV[4] layout: the layout (_layout.lua): 'single', or 'cluster:<id>' with the lowest
--   outbox id that may not be applied yet: the outbox is read from there
-- ARGV[5] anchor: (optional) id of the newest event the copy has ('' = none): the copy's
--   check
-- returns {meta, session state, user state, app state or outbox entries, events,
--         {EXISTS events, EXISTS event ids}} (hashes as field/value lists, events newest
--         first for 'recent'; {} when there is no session), with ARGV[5] two more: its
--         '<revision> <stream id>' (false when not stored) and the stream's first entry ({}
--         when none); {-3, key, error} when a key has a foreign type, or {-4, command, key}
--         when the ACL user may not run a command it needs
local cluster, unapplied = layout(ARGV[4])
local checked = ARGV[5] ~= nil
local refused = denied('HGETALL', KEYS[1], 'HGETALL', KEYS[2], 'HGETALL', KEYS[3],
  cluster and 'XRANGE' or 'HGETALL', KEYS[5],
  ARGV[1] == 'recent' and 'XREVRANGE' or 'XRANGE', KEYS[4], 'EXISTS', KEYS[4], 'EXISTS', KEYS[6])
  or (checked and denied('HGET', KEYS[6], 'XRANGE', KEYS[4]))
if refused then return refused end
local bad = nil
local function read(cmd, key, ...)
  local reply = redis.pcall(cmd, key, ...)
  if type(reply) == 'table' and reply['err'] then
    bad = bad or {-3, key, reply['err']}
    return {}
  end
  return reply
end
local meta = read('HGETALL', KEYS[1])
if bad then return bad end
if #meta == 0 then return {} end
local shared = {}
if cluster then
  shared = read('XRANGE', KEYS[5], unapplied, '+')
else
  shared = read('HGETALL', KEYS[5])
end
local events = {}
if ARGV[1] == 'all' then
  events = read('XRANGE', KEYS[4], ARGV[2], '+')
elseif ARGV[1] == 'recent' then
  events = read('XREVRANGE', KEYS[4], '+', ARGV[2], 'COUNT', ARGV[3])
end
local present = {redis.call('EXISTS', KEYS[4]), redis.call('EXISTS', KEYS[6])}
local out = {meta, read('HGETALL', KEYS[2]), read('HGETALL', KEYS[3]), shared, events, present}
if checked then
  local anchor = ARGV[5] ~= '' and read('HGET', KEYS[6], ARGV[5]) or false
  out[7] = anchor
  out[8] = read('XRANGE', KEYS[4], '-', '+', 'COUNT', 1)
end
return bad or out
