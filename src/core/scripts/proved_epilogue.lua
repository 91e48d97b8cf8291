
-- proved epilogue: run the body once and put the rid in front of its
-- reply, as the recorded script's epilogue does, with nothing recorded.
local reply = body()
table.insert(reply, 1, tonumber(ARGV[#ARGV]))
return reply
