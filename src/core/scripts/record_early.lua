-- record early reply: a check run before the record (core/script.rs) set
-- `early` for a try it can answer from what it read: a lock someone else
-- holds (nothing changes), or a copy of a request that already ran
-- (`early_replay`: the rid goes in front negated, as a replay's). It is
-- answered at once, and the record is neither read nor written. The check
-- also says whether the record must be read (`read_record`) and written
-- (`write_record`).
if early then
    local sign = 1
    if early_replay then
        sign = -1
    end
    table.insert(early, 1, sign * tonumber(ARGV[#ARGV]))
    return early
end
