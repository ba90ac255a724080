"""`nmt compare`: variants of one config trained under one budget and several seeds, then
compared by the spread across seeds and by the paired bootstrap (plan -> runner -> results ->
report)."""
