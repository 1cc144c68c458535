"""Write a GSM8K-shaped local data file (``question`` / ``answer`` columns; the answer is the final number, as the
``gsm8k`` preset extracts it after ``####``) for a few-step ``rl train`` where no hub is reachable (the GPU machine):
two-step word problems with known integer answers."""

import json
import random
import sys

NAMES = ["Ava", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana"]
THINGS = ["apples", "marbles", "stickers", "books", "coins", "pencils"]


def rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name, thing = rng.choice(NAMES), rng.choice(THINGS)
        a, b, c = rng.randint(2, 40), rng.randint(2, 9), rng.randint(1, 30)
        question = f"{name} has {a} {thing}, buys {b} times as many, then gives away {c}. How many {thing} now?"
        out.append({"question": question, "answer": str(a + a * b - c)})
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        for row in rows(int(sys.argv[2]) if len(sys.argv) > 2 else 512):
            f.write(json.dumps(row) + "\n")
