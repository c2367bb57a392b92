#!/usr/bin/env python3
"""make_capitals.py OUT.json - a small synthetic alpaca-style instruction set
(stepgraph's own, no download): 50 countries and their capitals, each asked in
4 phrasings, 200 records {"instruction", "input", "output"}, country by
country: a validation split of every 10th record (prepare_instruct.py
--val-fraction 0.1) asks about countries whose other phrasings are trained."""
import json
import sys

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"), ("Denmark", "Copenhagen"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"),
    ("Hungary", "Budapest"), ("Greece", "Athens"), ("Ireland", "Dublin"),
    ("Iceland", "Reykjavik"), ("Czechia", "Prague"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"),
    ("Ukraine", "Kyiv"), ("Turkey", "Ankara"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"),
    ("Nigeria", "Abuja"), ("Ghana", "Accra"), ("Morocco", "Rabat"), ("Ethiopia", "Addis Ababa"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"),
    ("Nepal", "Kathmandu"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
    ("Australia", "Canberra"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"),
    ("Cuba", "Havana"), ("Brazil", "Brasilia"), ("Argentina", "Buenos Aires"),
    ("Chile", "Santiago"), ("Peru", "Lima"), ("Colombia", "Bogota"), ("Venezuela", "Caracas"),
]
PHRASINGS = [
    "What is the capital of {c}?",
    "Name the capital city of {c}.",
    "Which city is the capital of {c}?",
    "Tell me the capital of {c}.",
]


def main(out):
    records = [{"instruction": p.format(c=c), "input": "",
                "output": "The capital of %s is %s." % (c, cap)}
               for c, cap in CAPITALS for p in PHRASINGS]
    json.dump(records, open(out, "w"), indent=1)
    print("%s: %d records" % (out, len(records)))


if __name__ == "__main__":
    main(sys.argv[1])
