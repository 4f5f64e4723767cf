-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py) (a
-- library: no KEYS, no ARGV).
-- layout(arg): which key layout the caller chose (sessions/_layout.py), from the one
--   argument that names it: 'single' -> false, nil (one node holds every key);
--   'cluster:<id>' -> true, '<id>' (every script stays in one hash slot; app-scope writes
--   go through the user's outbox stream, and <id> is its lowest id that may not be
--   applied yet). Anything else is an error, raised before any command runs.
local function layout(arg)
  if arg == 'single' then return false, nil end
  local id = string.match(arg or '', '^cluster:(%d+%-%d+)$')
  if not id then return error('ERR unknown key layout: ' .. tostring(arg)) end
  return true, id
end
