#!lua flags=no-writes
-- Reads the vectors of memory entries, for the plain backend's exact vector search: one
-- command instead of one HGET per entry (most of the time of a pipeline of thousands).
-- uses: _permitted
-- KEYS[1]... entries: entry hashes (one (app, user): one slot)
-- returns the "vec" field of each key, in order (false where there is none), or
--         {-4, command, key} when the ACL user may not run a command it needs
local refused = denied_each('HGET', KEYS)
if refused then return refused end
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('HGET', key, 'vec')
end
return out
