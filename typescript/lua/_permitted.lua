-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py), as every
-- script does: a library, not a script (no KEYS, no ARGV).
-- A command the connection's ACL user may not run stops a script with an error, and
-- Redis keeps whatever the script wrote before it: scripts are not rolled back. So each
-- script asks first, before any command, for every command it may run on every key, and
-- runs nothing when one is refused (which also lets the error name the command: Redis's
-- own error for a refused command inside a script does not).
-- denied(command, key, command, key, ...): {-4, command, key} for the first pair the user
--   may not run, else nil. denied_each(command, keys, from): the same for each of
--   keys[from..] (from defaults to 1). denied_keys(command, key, key, ...): the same for a
--   command that takes any number of keys (EXISTS), asked once for all of them while all
--   are permitted. They allocate nothing while all is permitted: they run on every call.
--   redis.acl_check_cmd is Redis >= 7.0 (older servers and fakeredis have nothing to ask,
--   and nothing is checked).
local function acl_refused(command, key)
  -- An ACL check looks only at the command, the number of arguments and where the keys
  -- are, so any values do after the key.
  local check = redis.acl_check_cmd
  if command == 'DEL' or command == 'EXISTS' or command == 'TYPE' or command == 'HGETALL'
      or command == 'SDIFF' or command == 'ZCARD' then
    return not check(command, key)
  elseif command == 'XADD' then
    return not check(command, key, '*', '0', '0')
  elseif command == 'HSET' or command == 'HINCRBY' or command == 'ZADD' or command == 'XTRIM' or command == 'XRANGE'
      or command == 'XREVRANGE' or command == 'ZREVRANGE' or command == 'ZRANGE' then
    return not check(command, key, '0', '0')
  end
  return not check(command, key, '0')
end

local function denied(...)
  if not redis.acl_check_cmd then return nil end
  for i = 1, select('#', ...), 2 do
    local command, key = select(i, ...)
    if acl_refused(command, key) then return {-4, command, key} end
  end
  return nil
end

local function denied_keys(command, ...)
  local check = redis.acl_check_cmd
  if not check or check(command, ...) then return nil end
  for i = 1, select('#', ...) do
    local key = select(i, ...)
    if acl_refused(command, key) then return {-4, command, key} end
  end
  return {-4, command, (...)}
end

local function denied_each(command, keys, from)
  if not redis.acl_check_cmd then return nil end
  for i = from or 1, #keys do
    if acl_refused(command, keys[i]) then return {-4, command, keys[i]} end
  end
  return nil
end
