-- latch early reply: a check run before the record (core/script.rs) set
-- `early` for a try that changes nothing (a lock someone else holds): it
-- is answered at once, the rid in front, and the record is neither read
-- nor written. The check also says whether the record must be read
-- (`read_record`).
if early then
    table.insert(early, 1, tonumber(ARGV[#ARGV]))
    return early
end
