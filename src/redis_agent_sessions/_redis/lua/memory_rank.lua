#!lua flags=no-writes
-- Plain-backend search: one user's entries ranked by BM25 (memory/_ranking.py), best first.
-- uses: _permitted, _postings, _scoring, _rank
-- KEYS[1] stats: the stats hash (n, len)
-- KEYS[2] texts: the texts hash
-- KEYS[3] df: the document frequencies hash
-- KEYS[4] context: the context hash (see _scoring.lua)
-- KEYS[5]... postings: posting zsets: a term's (entry id by weight) and gram ones (id by time)
-- ARGV[1] filter: the search's filter ('' = none: _scoring.lua's set_filter)
-- ARGV[2] limit: at most this many entries
-- ARGV[3] read_budget: most postings read in all
-- ARGV[4] substring_cap: most substring matches per term
-- ARGV[5] substring_weight: the weight of a substring match
-- ARGV[6] candidates: candidates scored
-- ARGV[7] expand: of which the best have their neighbours scored too
-- ARGV[8] author_weight: the weight of an author term
-- ARGV[9] k1: BM25 k1
-- ARGV[10] b: BM25 b
-- ARGV[11]... terms: the number of query terms, then for each (in the order scores are
--   summed): the term, times the query says it, its posting's KEYS index, the number of
--   gram postings and their KEYS indexes (an entry must be in all), and the substring to
--   verify ('' = none)
-- returns {the user's entries, postings read, id, score, ...}, best first (equal scores:
--         newest, then larger id), at most ARGV[2] entries, or {-4, command, key} when the
--         ACL user may not run a command
-- Candidates: postings are read best weight first, a chunk at a time from the term whose
-- next weight could add most; each entry met is scored on its own words as far as read
-- (what it scored in the postings read so far). Reading stops once the limit-th best of
-- those first scores beats anything an entry not yet met could still reach, or after the
-- read budget (ARGV[3]) of postings: a term in most entries is never read whole. The
-- best ARGV[6] candidates (all, when they are at most four times as many) are then scored
-- with their context, and the turns around the best ARGV[7] of them too (_scoring.lua's
-- best_entries).
local refused = denied_each('ZCARD', KEYS, 5) or denied_each('ZSCORE', KEYS, 5)
  or denied_each('ZREVRANGE', KEYS, 5) or denied('HMGET', KEYS[1], 'HGET', KEYS[2])
  or denied('HMGET', KEYS[3], 'HMGET', KEYS[4])
if refused then return refused end
set_filter(ARGV[1])
local n, read, rows = rank_postings({stats = KEYS[1], texts = KEYS[2], df = KEYS[3], ctx = KEYS[4]}, ARGV, 1)
return rows_reply(rows, {n, read})
