"""Checks that the greedy ids of a kv-run --json report agree with a reference
token list (BOS then greedy ids, as stories260K.greedy81.tokens.txt) for at
least the first N ids; prints how many agree."""
import json
import sys

report, reference, needed = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = json.load(open(report))["greedy"]
want = [int(t) for t in open(reference).read().split()][1:]
agree = 0
while agree < min(len(got), len(want)) and got[agree] == want[agree]:
    agree += 1
print(f"greedy ids agreeing with the reference: {agree} of {len(got)}")
if agree < needed:
    sys.exit(f"only {agree} greedy ids agree with {reference}, need {needed}: "
             f"got {got}, want {want[:len(got)]}")
