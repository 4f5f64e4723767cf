-- Memory scripts' shared helpers. Prepended to every script by _scripts.py (a library, not a
-- script: no KEYS, no ARGV).
-- stored_sig(own, tf, dl, au, grams, words): what an entry (those fields, as HMGET read
--   them) is found by, as memory/_store.py's stored_sig spells it; nil when it does not exist.
-- ranked_reply(ranked, limit, out): {id, score, ts} rows ordered best first (equal scores:
--   newest, then larger id), the first limit appended to out as id, score (17 digits).
local function stored_sig(own, tf, dl, au, grams, words)
  if tf then return (own or '') .. '|' .. tf .. '|' .. dl .. '|' .. (au or '') .. '|' .. (grams or '') end
  if words then return 'v1|' .. words .. '|' .. (grams or '') end
  return nil
end

local function ranked_reply(ranked, limit, out)
  table.sort(ranked, function(a, b)
    if a[2] ~= b[2] then return a[2] > b[2] end
    if a[3] ~= b[3] then return a[3] > b[3] end
    return a[1] > b[1]
  end)
  for i = 1, math.min(limit, #ranked) do
    out[#out + 1] = ranked[i][1]
    out[#out + 1] = string.format('%.17g', ranked[i][2])
  end
  return out
end
