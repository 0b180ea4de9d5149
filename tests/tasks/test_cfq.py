"""CFQ loader (CATALOG §1.3; thesis 4.3.2) on tiny files in the official format, written to tmp_path.

References: the thesis's own example pair (4.1.1) tokenised by hand following the official
``cfq/preprocess.py``; the split files' indices; Python's ``json`` module for what the streaming reader must
return and for where a syntax error is (line and column).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recombine import tasks
from recombine.errors import UserError
from recombine.tasks.base import Seq2SeqSplit, TaskData
from recombine.tasks.cfq import iter_records, tokenize_query, tokenize_question, write_compact_dataset

#: Records in the official layout (extra fields are ignored by the loader).
RECORDS = [
    {
        "questionPatternModEntities": "Was M0 a director and producer of M1",
        "sparqlPatternModEntities": "SELECT count(*) WHERE {\nM0 ns:film.director.film M1 .\n"
        "M0 ns:film.producer.film|ns:film.production_company.films M1\n}",
        "question": "Was Alfred Hitchcock a director and producer of Psycho",
        "complexityMeasures": {"recursionDepth": 12},
    },
    {
        "questionPatternModEntities": "Who directed M0's sequel?",
        "sparqlPatternModEntities": "SELECT DISTINCT ?x0 WHERE {\n?x0 ns:film.director.film ?x1 .\n"
        "?x1 ns:film.film.prequel M0 .\nFILTER ( ?x0 != m.0abc )\n}",
    },
    {
        "questionPatternModEntities": "Did M0 marry M1",
        "sparqlPatternModEntities": "SELECT count(*) WHERE {\nM0 ns:people.person.spouse_s M1\n}",
    },
    {
        "questionPatternModEntities": "What did M0 edit, write, and produce",
        "sparqlPatternModEntities": "SELECT DISTINCT ?x0 WHERE {\n?x0 ns:film.film.edited_by M0 .\n"
        "?x0 ns:film.film.written_by M0 .\n?x0 ns:film.film.produced_by M0\n}",
    },
]
SPLIT = {"trainIdxs": [0, 3], "devIdxs": [2], "testIdxs": [1]}


def write_cfq(
    folder: Path, records: list[dict[str, object]] | None = None, split_name: str = "mcd1.json"
) -> Path:
    (folder / "splits").mkdir(parents=True, exist_ok=True)
    (folder / "dataset.json").write_text(json.dumps(records or RECORDS, indent=2), encoding="utf-8")
    (folder / "splits" / split_name).write_text(json.dumps(SPLIT), encoding="utf-8")
    return folder


def decoded(task: TaskData, role: str) -> list[tuple[str, str]]:
    split = task.splits[role]
    assert isinstance(split, Seq2SeqSplit)
    return [
        (" ".join(task.input_vocab.decode(x)), " ".join(task.output_vocab.decode(y)))
        for x, y in zip(split.inputs, split.outputs, strict=True)
    ]


def test_tokenisation_of_the_thesis_example_follows_the_official_preprocessing() -> None:
    assert tokenize_question("Who directed M0's sequel?") == (
        "Who",
        "directed",
        "M0",
        "'",
        "s",
        "sequel",
        "?",
    )
    assert tokenize_question("What did M0 edit, write, and produce") == (
        *("What", "did", "M0", "edit", ",", "write", ",", "and", "produce"),
    )
    assert " ".join(tokenize_query(str(RECORDS[0]["sparqlPatternModEntities"]))) == (
        "SELECT count ( * ) WHERE { M0 film.director.film M1 . "
        "M0 film.producer.film|ns:film.production_company.films M1 }"
    )  # only a leading ns: is dropped (official preprocess_sparql)
    assert tokenize_query("FILTER ( ?x0 != m.0abc )\\nM0") == (
        "FILTER",
        "(",
        "?x0",
        "!=",
        "m_0abc",
        ")",
        "M0",
    )


def test_mcd_split_roles_follow_the_split_file(tmp_path: Path) -> None:
    task = tasks.get("cfq", path=str(write_cfq(tmp_path)), split="mcd1")
    assert list(task.splits) == ["train", "valid_ood", "test_ood"]
    expected = {
        role: [
            (
                " ".join(tokenize_question(str(RECORDS[i]["questionPatternModEntities"]))),
                " ".join(tokenize_query(str(RECORDS[i]["sparqlPatternModEntities"]))),
            )
            for i in SPLIT[key]
        ]
        for role, key in (("train", "trainIdxs"), ("valid_ood", "devIdxs"), ("test_ood", "testIdxs"))
    }
    assert {role: decoded(task, role) for role in task.splits} == expected
    assert decoded(task, "test_ood")[0][0] == "Who directed M0 ' s sequel ?"
    # vocabularies: every record's tokens, whichever split they are in
    questions = {t for r in RECORDS for t in tokenize_question(str(r["questionPatternModEntities"]))}
    queries = {t for r in RECORDS for t in tokenize_query(str(r["sparqlPatternModEntities"]))}
    assert set(task.input_vocab.tokens) == questions | {"<pad>"}
    assert set(task.output_vocab.tokens) == queries | {"<pad>"}
    test = task.splits["test_ood"]
    assert isinstance(test, Seq2SeqSplit) and test.group.tolist() == [len(expected["test_ood"][0][1].split())]
    assert task.selection_split == "valid_ood" and task.spec.kind == "seq2seq"


def test_random_split_is_iid_and_split_file_names_and_paths_are_accepted(tmp_path: Path) -> None:
    folder = write_cfq(tmp_path, split_name="random_split.json")
    task = tasks.get("cfq", path=str(folder), split="random")
    assert list(task.splits) == ["train", "valid_iid", "test_iid"] and "IID split" in task.description
    by_path = tasks.get(
        "cfq", path=str(folder / "dataset.json"), split=str(folder / "splits" / "random_split.json")
    )
    assert list(by_path.splits) == [
        "train",
        "valid_ood",
        "test_ood",
    ]  # a split path is taken as a divergent split
    assert decoded(by_path, "train") == decoded(task, "train")


def test_streaming_reader_equals_json_load_at_any_chunk_size(tmp_path: Path) -> None:
    path = write_cfq(tmp_path) / "dataset.json"
    for chunk in (1, 7, 64, 1 << 20):
        assert [record for _, record in iter_records(path, chunk_chars=chunk)] == RECORDS
    empty = tmp_path / "empty.json"
    empty.write_text(" [ ]\n", encoding="utf-8")
    assert list(iter_records(empty, chunk_chars=2)) == []


def test_compact_dataset_keeps_the_two_fields_and_builds_the_same_task(tmp_path: Path) -> None:
    full = write_cfq(tmp_path / "full")
    compact = write_cfq(tmp_path / "compact")
    assert write_compact_dataset(full / "dataset.json", compact / "dataset.json") == len(RECORDS)
    kept = json.loads((compact / "dataset.json").read_text(encoding="utf-8"))
    assert [set(r) for r in kept] == [{"questionPatternModEntities", "sparqlPatternModEntities"}] * len(
        RECORDS
    )
    first, second = tasks.get("cfq", path=str(full)), tasks.get("cfq", path=str(compact))
    assert all(decoded(first, role) == decoded(second, role) for role in first.splits)


def test_cache_follows_changes_of_dataset_json(tmp_path: Path) -> None:
    folder = write_cfq(tmp_path)
    assert decoded(tasks.get("cfq", path=str(folder)), "valid_ood") == [
        ("Did M0 marry M1", "SELECT count ( * ) WHERE { M0 people.person.spouse_s M1 }")
    ]
    changed = [dict(r) for r in RECORDS]
    changed[2]["questionPatternModEntities"] = "Did M1 marry M0 ?"
    write_cfq(folder, changed)
    assert decoded(tasks.get("cfq", path=str(folder)), "valid_ood")[0][0] == "Did M1 marry M0 ?"


def test_missing_files_say_what_to_download_and_where(tmp_path: Path) -> None:
    with pytest.raises(
        UserError,
        match=r"CFQ data folder .*missing not found; download cfq1\.1\.tar\.gz .*google-research/tree/"
        r"master/cfq.*task\.path",
    ):
        tasks.get("cfq", path=str(tmp_path / "missing"))
    with pytest.raises(UserError, match=r"dataset\.json not found in .*cfq1\.1\.tar\.gz"):
        tasks.get("cfq", path=str(tmp_path))
    write_cfq(tmp_path)
    with pytest.raises(UserError, match=r"split file mcd2\.json \(or mcd2_split\.json\) not found"):
        tasks.get("cfq", path=str(tmp_path), split="mcd2")
    with pytest.raises(
        UserError,
        match=r"task\.split='mcd4' is not a CFQ split; valid choices: mcd3, mcd2, mcd1, query_complexity",
    ):
        tasks.get("cfq", path=str(tmp_path), split="mcd4")


def test_malformed_files_are_reported_with_file_line_and_column(tmp_path: Path) -> None:
    folder = write_cfq(tmp_path)
    text = json.dumps(RECORDS, indent=2)
    broken = text.replace('"Did M0 marry M1",', '"Did M0 marry M1"', 1)  # a missing comma inside record 2
    (folder / "dataset.json").write_text(broken, encoding="utf-8")
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(broken)
    where = f"{reference.value.lineno}:{reference.value.colno}"
    with pytest.raises(
        UserError, match=rf"dataset\.json:{where}: malformed CFQ JSON: Expecting ',' delimiter"
    ):
        tasks.get("cfq", path=str(folder))
    (folder / "dataset.json").write_text(text[:-2], encoding="utf-8")  # truncated download
    with pytest.raises(UserError, match=r"dataset\.json:\d+:\d+: malformed CFQ JSON"):
        tasks.get("cfq", path=str(folder))
    (folder / "dataset.json").write_text(json.dumps([RECORDS[0], {"question": "x"}]), encoding="utf-8")
    with pytest.raises(
        UserError, match=r"dataset\.json:1:\d+: .*record 1 has no text field 'questionPatternModEntities'"
    ):
        tasks.get("cfq", path=str(folder))
    write_cfq(folder)
    (folder / "splits" / "mcd1.json").write_text('{"trainIdxs": [0, 1],\n "devIdxs": [2]\n "testIdxs": []}')
    with pytest.raises(UserError, match=r"mcd1\.json:3:2: malformed CFQ split JSON: Expecting ',' delimiter"):
        tasks.get("cfq", path=str(folder))
    (folder / "splits" / "mcd1.json").write_text(json.dumps({**SPLIT, "testIdxs": [4]}))
    with pytest.raises(UserError, match=r"mcd1\.json: testIdxs has index 4, but dataset\.json has 4 records"):
        tasks.get("cfq", path=str(folder))
    (folder / "splits" / "mcd1.json").write_text(json.dumps({"trainIdxs": [0]}))
    with pytest.raises(
        UserError, match=r"mcd1\.json: a CFQ split file is an object with the lists trainIdxs"
    ):
        tasks.get("cfq", path=str(folder))
