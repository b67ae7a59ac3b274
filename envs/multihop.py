"""Fictional two-hop fact QA ("Where was the employer of X born?") with gold documents among distractors."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from memrl_envs.loaders import QATask

PEOPLE = (
    "Kema", "Dulia", "Pasis", "Bamel", "Delel", "Bulis", "Rulel", "Belen", "Horo", "Pisen", "Dusis", "Kaso",
    "Mumia", "Heden", "Selan", "Nonie", "Hulo", "Noria", "Foma", "Radia", "Kisie", "Polo", "Hovo", "Bivie", "Hovia",
    "Bonen", "Pama", "Giris", "Lodie", "Demel", "Nirel", "Vunel", "Koren", "Deris", "Relie", "Vuran", "Harel",
    "Nisia", "Fusa", "Mumel", "Lolie", "Rolis", "Demen", "Disa", "Dasen", "Nana", "Desel", "Finia", "Malie",
    "Moman", "Delia", "Simen", "Naria", "Fulan", "Ravan", "Niria", "Tesia", "Resis", "Tedel", "Serie", "Kalan",
    "Miria", "Mino", "Garie", "Girie", "Puda", "Mido", "Vamis", "Memia", "Domel", "Saven", "Felen", "Poden",
    "Pumia", "Fusen", "Bado", "Nemis", "Velan", "Gisis", "Tunan",
)
"""People's names (one word each)."""
COMPANIES = (
    "Quovex", "Trorum", "Stuvum", "Grurex", "Skerex", "Grevix", "Zyarex", "Trurum", "Skarex", "Krekex", "Druzum",
    "Brazar", "Zyurum", "Krizum", "Quoron", "Quiron", "Skezex", "Stokex", "Kroxon", "Plavic", "Trekon", "Skexix",
    "Skevon", "Stuzar", "Stekar", "Drixar", "Quozic", "Brokum", "Zyirex", "Drexex", "Plixon", "Plezic", "Plovum",
    "Quuzic", "Trakex", "Groxar", "Brakex", "Zyexar", "Droxar", "Quokum", "Graric", "Kravar", "Brevar", "Pluvar",
    "Skuvar", "Brarum", "Kruzon", "Skazic", "Skuzum", "Plevar", "Krezar", "Brexex", "Plovex", "Droric", "Pluvic",
    "Plazon", "Grizex", "Plikum", "Trexar", "Krivex",
)
"""Company names (one word each)."""
CITIES = (
    "Hulport", "Gerford", "Colton", "Lasford", "Gorham", "Pesmere", "Surwick", "Seldale", "Selby", "Calton",
    "Roldale", "Wulford", "Reswick", "Bulham", "Raswick", "Tanby", "Serport", "Mulport", "Rolby", "Cenwick",
    "Rorford", "Maswick", "Rarport", "Gosport", "Marwick", "Culwick", "Lerham", "Parwick", "Henham", "Sorport",
    "Multon", "Busdale", "Gesmere", "Lolmere", "Bondale", "Celwick", "Goldale", "Landale", "Tolwick", "Canton",
    "Fosmere", "Fosford", "Turham", "Buston", "Rosford", "Nerport", "Lonwick", "Gosby", "Gusham", "Delby",
    "Nurport", "Huston", "Nerham", "Dolmere", "Fonby", "Seswick", "Haswick", "Porby", "Cordale", "Luswick",
)
"""City names (one word each)."""
SURNAMES = (
    "Belott", "Susing", "Dokott", "Selard", "Geking", "Saking", "Berane", "Birley", "Toling", "Dikane", "Konard",
    "Walane", "Lonley", "Kokard", "Telott", "Lalard", "Solley", "Sanott", "Moring", "Lulard", "Senard", "Korley",
    "Lakott", "Werott", "Rakard", "Raring", "Wesing", "Besott", "Malard", "Merane", "Misard", "Dalley", "Dising",
    "Tesley", "Loling", "Senane", "Senley", "Sasard", "Rasing", "Salley",
)
"""Second words of people's names when name_length='long'."""

COMPANY_SUFFIXES = ("Labs", "Works", "Group", "Systems", "Holdings", "Partners", "Motors", "Foods")
"""Second words of company names when name_length='long'."""
CITY_SUFFIXES = ("Falls", "Heights", "Springs", "Harbor", "Crossing", "Hills", "Bay", "Valley")
"""Second words of city names when name_length='long'."""

CHAINS = ("born", "founded", "mixed")
"""'born': X works for a person Y, Y was born in Z. 'founded': X works for a company Y, Y was founded in Z.
'mixed': the seed picks one of the two."""
QUESTIONS = {
    "born": "Where was the employer of {x} born?",
    "founded": "Where was the employer of {x} founded?",
}
MAX_FIRST_DOC_NUMBER = 2000
"""Largest first document number drawn when MultiHopConfig.first_doc_number is None."""
FACT_RE = re.compile(r"(.+?) (works for|was born in|was founded in) (.+?)\.")
"""Parses a fact sentence into (subject, relation, object); tests and users check answer uniqueness with it."""


@dataclass(frozen=True)
class MultiHopConfig:
    """Knobs of the two-hop fact generator."""

    num_docs: int | tuple[int, ...] = 10
    """Documents in the context, gold ones included: the context-length knob (eval at 2x..16x = more distractors).
    A tuple of lengths draws one of them per task from its seed, so training can cover several lengths."""
    facts_per_doc: int = 1
    """Fact sentences per document; a gold document holds its gold fact among facts_per_doc - 1 distractors."""
    hardness: str = "easy"
    """'easy': distractor facts never mention the question's entities. 'hard': every fact that shares an entity
    with the question chain (X's own birthplace, the employer's employer, other people born in Z, ...) comes
    first, then unrelated ones. The world gives each person one employer and one birthplace, so the answer
    stays unique either way."""
    gold_positions: tuple[float, float] | None = None
    """Relative depths in [0, 1] of the hop-1 ("X works for Y.") and hop-2 documents, hop 1 no later than hop 2
    (0 = first document, 1 = last). None draws both from the seed, the same depths at every num_docs."""
    name_length: str = "short"
    """'short': one-word names. 'long': two-word names (a second word per entity)."""
    chain: str = "born"
    """Which relation chain the question follows; one of CHAINS."""
    first_doc_number: int | None = 1
    """Number of the first document ("Document 1:", as RULER). None draws it per task from the seed in
    [1, MAX_FIRST_DOC_NUMBER], the same at every num_docs: numbers then say nothing about where a document sits,
    so a model trained at one length cannot use "Document 10" as a sign that the context is about to end."""

    def __post_init__(self) -> None:
        if isinstance(self.num_docs, list):  # JSON configs carry lists
            object.__setattr__(self, "num_docs", tuple(self.num_docs))
        lengths = self.lengths()
        if not lengths or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 2 for n in lengths):
            raise ValueError(f"MultiHopConfig.num_docs must be an int >= 2 (two gold documents) or a non-empty tuple "
                             f"of such ints, got {self.num_docs!r}")
        if not isinstance(self.facts_per_doc, int) or self.facts_per_doc < 1:
            raise ValueError(f"MultiHopConfig.facts_per_doc must be an int >= 1, got {self.facts_per_doc!r}")
        if self.hardness not in ("easy", "hard"):
            raise ValueError(f"MultiHopConfig.hardness={self.hardness!r} is not allowed; choose 'easy' or 'hard'")
        if self.name_length not in ("short", "long"):
            raise ValueError(
                f"MultiHopConfig.name_length={self.name_length!r} is not allowed; choose 'short' or 'long'"
            )
        if self.chain not in CHAINS:
            raise ValueError(f"MultiHopConfig.chain={self.chain!r} is not allowed; choose one of {CHAINS}")
        if self.first_doc_number is not None and (
            not isinstance(self.first_doc_number, int) or self.first_doc_number < 0
        ):
            raise ValueError(
                f"MultiHopConfig.first_doc_number={self.first_doc_number!r} is not allowed; give an int >= 0, "
                "or None to draw it from the seed"
            )
        if self.gold_positions is not None:
            p = self.gold_positions
            if len(p) != 2 or not all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in p) or p[0] > p[1]:
                raise ValueError(
                    f"MultiHopConfig.gold_positions={p!r} is not allowed; give (hop1, hop2) depths in [0, 1] with "
                    "hop1 <= hop2 (a reader going in order must meet X's employer before the employer's city)"
                )

    def max_context_chars(self) -> int:
        """An upper bound on the length of any context this config generates."""
        longest = max(len(n) for n in PEOPLE + COMPANIES + CITIES) + 1 + max(
            len(s) for s in SURNAMES + COMPANY_SUFFIXES + CITY_SUFFIXES
        )
        fact = 2 * longest + len(" was founded in .")
        most = max(self.lengths())
        last = (MAX_FIRST_DOC_NUMBER if self.first_doc_number is None else self.first_doc_number) + most
        doc = len(f"Document {last}: ") + self.facts_per_doc * (fact + 1)
        return most * (doc + 1)

    def lengths(self) -> tuple[int, ...]:
        """The context lengths (in documents) this config draws from."""
        return self.num_docs if isinstance(self.num_docs, tuple) else (self.num_docs,)

    def num_docs_of(self, seed: int) -> int:
        """The number of documents of the seed's task: num_docs, or the length the seed draws from the tuple."""
        lengths = self.lengths()
        return lengths[0] if len(lengths) == 1 else random.Random(f"multihop-length-{seed}").choice(lengths)


def _names(base: tuple[str, ...], seconds: tuple[str, ...], long: bool) -> list[str]:
    # The first word is unique within and across lists, so adding a second word keeps names unique.
    return [f"{n} {seconds[i % len(seconds)]}" if long else n for i, n in enumerate(base)]


def _world(seed: int, config: MultiHopConfig) -> tuple[str, list[str], list[str]]:
    """The seed's question, gold facts (hop 1, hop 2) and every other fact of its world."""
    rng = random.Random(f"multihop-world-{seed}")
    long = config.name_length == "long"
    people = _names(PEOPLE, SURNAMES, long)
    cities = _names(CITIES, CITY_SUFFIXES, long)
    chain = rng.choice(("born", "founded")) if config.chain == "mixed" else config.chain
    facts: list[str] = []
    if chain == "born":
        employer = {p: rng.choice([q for q in people if q != p]) for p in people}
        place = {p: rng.choice(cities) for p in people}
        x = rng.choice(people)
        y = employer[x]
        gold = [f"{x} works for {y}.", f"{y} was born in {place[y]}."]
    else:
        companies = _names(COMPANIES, COMPANY_SUFFIXES, long)
        employer = {p: rng.choice(companies) for p in people}
        place = {p: rng.choice(cities) for p in people}
        founded = {c: rng.choice(cities) for c in companies}
        x = rng.choice(people)
        y = employer[x]
        gold = [f"{x} works for {y}.", f"{y} was founded in {founded[y]}."]
        facts += [f"{c} was founded in {z}." for c, z in founded.items()]
    facts += [f"{p} works for {e}." for p, e in employer.items()]
    facts += [f"{p} was born in {z}." for p, z in place.items()]
    return QUESTIONS[chain].format(x=x), gold, [f for f in facts if f not in gold]


def _entities(fact: str) -> tuple[str, str]:
    match = FACT_RE.fullmatch(fact)
    return match.group(1), match.group(3)


def _distractor_stream(seed: int, config: MultiHopConfig, gold: list[str], others: list[str]) -> Iterator[str]:
    """Distractor facts in a seed-fixed order, so a longer context extends a shorter one's distractors."""
    rng = random.Random(f"multihop-distractors-{seed}")
    chain_entities = {*_entities(gold[0]), *_entities(gold[1])}
    related = [f for f in others if set(_entities(f)) & chain_entities]
    unrelated = [f for f in others if f not in related]
    if config.hardness == "hard":
        rng.shuffle(related)
        yield from related
    while True:  # cycle through the unrelated facts, reshuffled each pass, for contexts longer than the world
        rng.shuffle(unrelated)
        yield from unrelated


def make_task(seed: int, config: MultiHopConfig | None = None) -> QATask:
    """The seed's task: question, gold facts and answer depend on the seed only; num_docs adds distractors."""
    config = config or MultiHopConfig()
    question, gold, others = _world(seed, config)
    answer = _entities(gold[1])[1]
    n, k = config.num_docs_of(seed), config.facts_per_doc
    depths = config.gold_positions
    if depths is None:
        depth_rng = random.Random(f"multihop-positions-{seed}")  # one generator, two draws
        depths = tuple(sorted(depth_rng.random() for _ in range(2)))
    i1, i2 = (min(int(d * n), n - 1) for d in depths)
    if i2 <= i1:  # both depths fell on one document: keep them adjacent, hop 1 first
        i1, i2 = (i1, i1 + 1) if i1 + 1 < n else (n - 2, n - 1)
    stream = _distractor_stream(seed, config, gold, others)
    slot_rng = random.Random(f"multihop-slots-{seed}")
    first = config.first_doc_number
    if first is None:
        first = random.Random(f"multihop-numbers-{seed}").randint(1, MAX_FIRST_DOC_NUMBER)
    documents = []
    for i in range(n):
        facts = [next(stream) for _ in range(k - 1 if i in (i1, i2) else k)]
        if i in (i1, i2):
            facts.insert(slot_rng.randrange(k), gold[0] if i == i1 else gold[1])
        documents.append(f"Document {first + i}: " + " ".join(facts))
    return QATask(question=question, documents=tuple(documents), answers=(answer,), gold_facts=tuple(gold))

