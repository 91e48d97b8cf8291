
-- latch epilogue: run the body once, put the rid in front of its reply (so
-- the client can tell its own reply from any other) and record it.
local reply = body()
table.insert(reply, 1, tonumber(rid))
redis.call('set', latch_key, rid .. '|' .. table.concat(reply, ','), 'px', ARGV[#ARGV - 1])
return reply
