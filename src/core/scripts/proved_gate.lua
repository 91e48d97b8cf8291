-- proved gate: the start of a recorded script's twin sent without its
-- request record (core/script.rs, "Sent without the record").
--
-- Comes after the check and proved_early.lua. The twin is sent with the
-- script's keys and arguments less the request record (the last key) and
-- its TTL (the last argument but one); ARGV[#ARGV] is the request id as
-- in the recorded script. If the check did not prove this the request's
-- first run (it asks for the record to be read or written), nothing is
-- changed and the reply is {-2, rid}: the client sends the recorded
-- script with the same request id instead.
if read_record or write_record then
    return {-2, ARGV[#ARGV]}
end
