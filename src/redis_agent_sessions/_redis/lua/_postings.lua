-- The postings' scale, shared by their writer (_entries.lua) and their reader (_rank.lua).
-- Prepended to every script that names it on its '-- uses:' line (_redis/scripts.py) (a
-- library, not a script: no KEYS, no ARGV).
-- POSTING_SCALE: a posting's score is its BM25 weight in units of 1/POSTING_SCALE, an
--   integer: a small sorted set compares integer scores without parsing each one.
local POSTING_SCALE = 10000
