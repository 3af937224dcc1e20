"""Writes tickets.csv: synthetic support tickets (a short text and its topic), made from word
pools with a fixed seed, so the example needs no download. Run it to regenerate the file:
    python examples/text_ragged/make_tickets.py
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

TOPICS = {
    "billing": ["invoice", "charged", "refund", "payment", "card", "price", "bill", "twice",
                "subscription", "receipt"],
    "shipping": ["parcel", "delivery", "courier", "tracking", "arrived", "late", "address",
                 "package", "shipped", "lost"],
    "technical": ["app", "crash", "login", "error", "password", "update", "screen", "sync",
                  "bug", "slow"],
}
COMMON = ["my", "the", "please", "help", "i", "was", "is", "not", "again", "today", "why",
          "it", "a", "with", "order", "account", "still", "cannot", "need", "urgent"]


def ticket(rng: random.Random, topic: str) -> str:
    words = rng.sample(TOPICS[topic], rng.randint(1, 3))
    words += rng.sample(COMMON, rng.randint(2, 8))
    if rng.random() < 0.15:  # some noise: a word of another topic
        words.append(rng.choice(TOPICS[rng.choice([t for t in TOPICS if t != topic])]))
    rng.shuffle(words)
    return " ".join(words)


def main(rows: int = 1200, seed: int = 7) -> Path:
    rng = random.Random(seed)
    out = Path(__file__).with_name("tickets.csv")
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "topic"])
        for _ in range(rows):
            topic = rng.choice(sorted(TOPICS))
            w.writerow([ticket(rng, topic), topic])
    return out


if __name__ == "__main__":
    print(main())
