-- Stores re-embedded vectors on memory entries whose content is still what was embedded.
-- uses: _permitted
-- KEYS[1]... entries: entry hashes (one (app, user): one slot)
-- ARGV[1] model: the model name (vmodel)
-- ARGV[2]... rows: for each key, the content that was embedded (as read: compared whole,
--   which costs no more than reading it did), its vkey, its vector
-- returns {stored, skipped} (skipped: the entry is gone or its content changed since it
--         was read; the next run embeds it again), or {-4, command, key} when the ACL user
--         may not run a command it needs (nothing written)
local refused = denied_each('HGET', KEYS) or denied_each('HSET', KEYS)
if refused then return refused end
local stored, skipped = 0, 0
for i, key in ipairs(KEYS) do
  local at = 2 + (i - 1) * 3
  local content = redis.call('HGET', key, 'content')
  if content == ARGV[at] then
    redis.call('HSET', key, 'vkey', ARGV[at + 1], 'vmodel', ARGV[1], 'vec', ARGV[at + 2])
    stored = stored + 1
  else
    skipped = skipped + 1
  end
end
return {stored, skipped}
