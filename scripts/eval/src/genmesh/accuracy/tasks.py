"""The accuracy task set, generated deterministically here (nothing is downloaded).

100 four-way multiple-choice questions (capitals, opposites, sums, colours, plurals) scored by
log-likelihood, as lm-eval's multiple-choice tasks are: ``context`` then each ``" " + choice``;
and 30 short chat questions answered greedily. Small enough for SmolLM2-135M to get most of them
right, so that a served model that is not the GGUF's shows up as lost answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SEED = 20261123

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Egypt", "Cairo"), ("Russia", "Moscow"), ("China", "Beijing"), ("England", "London"), ("Canada", "Ottawa"),
    ("Australia", "Canberra"), ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
    ("Turkey", "Ankara"), ("India", "New Delhi"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("Thailand", "Bangkok"), ("Cuba", "Havana"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Hungary", "Budapest"), ("South Korea", "Seoul"),
]  # fmt: skip
OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"), ("fast", "slow"), ("happy", "sad"),
    ("old", "young"), ("light", "dark"), ("open", "closed"), ("wet", "dry"), ("hard", "soft"), ("early", "late"),
    ("full", "empty"), ("high", "low"), ("rich", "poor"), ("strong", "weak"), ("loud", "quiet"),
    ("black", "white"), ("win", "lose"), ("push", "pull"),
]  # fmt: skip
COLOURS = [
    ("the sky on a clear day", "blue"), ("fresh grass", "green"), ("snow", "white"), ("a ripe banana", "yellow"),
    ("coal", "black"), ("blood", "red"), ("an orange", "orange"), ("a lemon", "yellow"), ("milk", "white"),
    ("a strawberry", "red"),
]  # fmt: skip
PLURALS = [
    ("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"), ("man", "men"),
    ("woman", "women"), ("goose", "geese"), ("person", "people"), ("cat", "cats"), ("box", "boxes"),
    ("city", "cities"), ("knife", "knives"), ("leaf", "leaves"), ("baby", "babies"), ("dog", "dogs"),
]  # fmt: skip
COLOUR_NAMES = ["blue", "green", "white", "yellow", "black", "red", "orange", "purple", "brown", "pink"]


@dataclass(frozen=True)
class MultipleChoice:
    id: str
    context: str
    choices: list[str]  # continuations, each starting with a space
    gold: int


@dataclass(frozen=True)
class ChatQuestion:
    id: str
    question: str


def _mc(rng: random.Random, ident: str, question: str, answer: str, pool: list[str]) -> MultipleChoice:
    wrong = rng.sample([p for p in pool if p != answer], 3)
    options = [answer, *wrong]
    rng.shuffle(options)
    return MultipleChoice(ident, f"Question: {question}\nAnswer:", [f" {o}" for o in options], options.index(answer))


def _plural_distractors(word: str, answer: str) -> list[str]:
    return [w for w in {word + "s", word + "es", answer + "s", word} if w != answer]


def multiple_choice() -> list[MultipleChoice]:
    rng = random.Random(SEED)
    items: list[MultipleChoice] = []
    capitals = [c for _, c in CAPITALS]
    for country, capital in CAPITALS:
        items.append(_mc(rng, f"capital-{country}", f"What is the capital of {country}?", capital, capitals))
    antonyms = [b for _, b in OPPOSITES] + [a for a, _ in OPPOSITES]
    for word, opposite in OPPOSITES:
        pool = [w for w in antonyms if w != word]
        items.append(_mc(rng, f"opposite-{word}", f"What is the opposite of {word}?", opposite, pool))
    for k in range(25):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        total = a + b
        pool = [str(total + d) for d in (-10, -2, -1, 1, 2, 10) if total + d > 0] + [str(total)]
        items.append(_mc(rng, f"sum-{k}", f"What is {a} plus {b}?", str(total), pool))
    for thing, colour in COLOURS:
        items.append(_mc(rng, f"colour-{thing}", f"What color is {thing}?", colour, COLOUR_NAMES))
    for word, plural in PLURALS:
        pool = _plural_distractors(word, plural)
        pool += [p for _, p in PLURALS if p != plural][: max(0, 4 - len(pool))]
        items.append(_mc(rng, f"plural-{word}", f"What is the plural of {word}?", plural, sorted(set(pool) | {plural})))
    return items


def chat_questions() -> list[ChatQuestion]:
    rng = random.Random(SEED + 1)
    out = [
        ChatQuestion(f"chat-capital-{c}", f"What is the capital of {c}? Answer in one word.")
        for c, _ in rng.sample(CAPITALS, 10)
    ]
    for k in range(10):
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        out.append(ChatQuestion(f"chat-sum-{k}", f"What is {a} plus {b}? Answer with a number."))
    out.extend(
        ChatQuestion(f"chat-opposite-{w}", f"What is the opposite of {w}? Answer in one word.")
        for w, _ in rng.sample(OPPOSITES, 10)
    )
    return out
