-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py) (a
-- library: no KEYS, no ARGV).
-- The app's expiry index (ras:{<app>}:sessions_expiry, a zset) scores each session that
-- expires by the ms time it is due to be checked: when it expires, by the clock of the worker
-- that last set its TTL (sessions/_layout.py). A due member is only a candidate: the prune
-- script re-checks that its session is gone before dropping anything, so no clock is trusted.
-- expiry_due(key, now, n): up to n members of the expiry zset `key` due at `now` (ms text),
--   earliest first, each claimed (re-scored to now + EXPIRY_RECHECK_MS) so that concurrent
--   writers take different ones, and one whose check never happens (its worker died) comes
--   due again. The caller asked for ZRANGE and ZADD on key, and knows it holds a zset.
local EXPIRY_RECHECK_MS = 60000
-- A session found alive past the time its metadata gives is checked again this soon at first
-- (see prune_index.lua), then less often the longer it outlives that time.
local EXPIRY_SOON_MS = 1000

local function expiry_due(key, now, n)
  if n <= 0 then return {} end
  local found = redis.call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0, n)
  if #found == 0 then return found end
  local later = string.format('%.0f', tonumber(now) + EXPIRY_RECHECK_MS)
  -- In slices: unpack() is bounded by the Lua stack.
  for from = 1, #found, 1000 do
    local claims = {}
    for i = from, math.min(from + 999, #found) do
      claims[#claims + 1] = later
      claims[#claims + 1] = found[i]
    end
    redis.call('ZADD', key, unpack(claims))
  end
  return found
end

-- expires_at(now, ttl): the ms time (text) a session given `ttl` seconds at `now` expires.
local function expires_at(now, ttl)
  return string.format('%.0f', tonumber(now) + ttl * 1000)
end
