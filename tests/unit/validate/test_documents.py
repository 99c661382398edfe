"""Reading manifests: document splitting, line numbers, kubectl's YAML scalars, duplicates, JSON."""

from __future__ import annotations

import math

import pytest

from trainstack.validate import documents


def _docs(text: str, file: str = "f.yaml") -> list[documents.Document]:
    return list(documents.documents(file, text))


def test_multi_document_indexes_and_start_lines():
    text = "# head comment\n---\na: 1\n---\n# only a comment\n---\nb: 2\n...\n---\nc: 3\n"
    docs = _docs(text)
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert [d.line for d in docs] == [3, 7, 10]
    assert [d.index for d in docs] == [0, 2, 3]


def test_one_broken_document_does_not_hide_the_next():
    docs = _docs("a: [1,\n---\nb: 2\n")
    assert docs[0].data is None and docs[0].problems[0].rule == "yaml-syntax"
    assert docs[0].problems[0].line == 2
    assert docs[1].data == {"b": 2}


def test_a_tab_that_indents_a_line_is_called_a_tab():
    docs = _docs("a: 1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: x\n")
    problem = docs[1].problems[0]
    assert (problem.rule, problem.line) == ("yaml-syntax", 6)
    assert "tab" in problem.message and "line 6" in problem.message


def test_document_marker_inside_a_block_scalar_ends_the_document():
    docs = _docs("a: |\n  text\n---\nb: 1\n")
    assert docs[0].data == {"a": "text\n"} and docs[1].data == {"b": 1}


@pytest.mark.parametrize("text,value", [
    ("y", True), ("n", False), ("yes", True), ("off", False), ("True", True), ("~", None), ("null", None),
    ("12:30", "12:30"), ("0644", 420), ("0x1F", 31), ("0b101", 5), ("1_000", 1000), ("-12", -12),
    ("1.5", 1.5), ("1e3", 1000.0), (".5", 0.5), ("2024-01-01", "2024-01-01"), ("2024-01-01T10:00:00Z",
                                                                               "2024-01-01T10:00:00Z"),
    ("'y'", "y"), ('"0644"', "0644"), ("09", 9), ("18446744073709551616", 18446744073709551616.0), ("+1", 1),
])
def test_plain_scalars_resolve_like_kubectl(text: str, value):
    [doc] = _docs(f"v: {text}\n")
    assert doc.data["v"] == value and type(doc.data["v"]) is type(value)


def test_y_as_a_key_is_true_as_in_go_yaml_v2():
    [doc] = _docs("y: 1\nn: 2\n")
    assert doc.data == {"true": 1, "false": 2}


def test_non_string_keys_become_their_json_text():
    [doc] = _docs("1: a\ntrue: b\non: c\nnull: d\n")
    assert doc.data == {"1": "a", "true": "c", "null": "d"}
    assert [p.rule for p in doc.problems] == ["duplicate-key"]  # `true` and `on` are the same key


def test_duplicate_keys_report_path_and_lines():
    [doc] = _docs("a:\n  b: 1\n  c: 2\n  b: 3\n")
    [problem] = doc.problems
    assert problem.rule == "duplicate-key" and problem.path == "/a/b" and problem.line == 4
    assert "first at line 2" in problem.message
    assert doc.data == {"a": {"b": 3, "c": 2}}


def test_merge_keys_are_not_duplicates():
    [doc] = _docs("base: &b {x: 1, z: 2}\nuse:\n  <<: *b\n  z: 3\n")
    assert doc.data["use"] == {"x": 1, "z": 3}
    assert not doc.problems


def test_nan_and_infinity_cannot_go_to_the_api_server():
    [doc] = _docs("a: .nan\nb: -.inf\nc: '.nan'\n")
    assert {p.path for p in doc.problems} == {"/a", "/b"}
    assert math.isnan(doc.data["a"]) and doc.data["c"] == ".nan"


def test_alias_bombs_are_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    [doc] = _docs("\n".join(lines) + "\n")
    assert doc.data is None and "aliases" in doc.problems[0].message


def test_recursive_aliases_are_refused():
    [doc] = _docs("a: &x\n  b: *x\n")
    assert doc.data is None and "itself" in doc.problems[0].message


def test_line_of_a_json_pointer():
    text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: a\n    - name: b\n      image: x\n"
    [doc] = _docs(text)
    assert doc.line_of("/spec/containers/1/image") == 7
    assert doc.line_of("/spec/containers/0") == 5
    assert doc.line_of("/spec/missing/deeper") == 3
    assert doc.line_of("") == 1


def test_json_files_with_duplicates_and_lines():
    text = '{\n  "kind": "ConfigMap",\n  "data": {\n    "a": "1",\n    "a": "2"\n  }\n}\n'
    [doc] = _docs(text, "cm.json")
    assert doc.data["data"] == {"a": "2"}
    [problem] = doc.problems
    assert problem.rule == "duplicate-key" and problem.path == "/data/a" and problem.line == 5
    assert doc.line_of("/data/a") == 4


def test_a_v1_list_is_expanded():
    text = "apiVersion: v1\nkind: List\nitems:\n  - {kind: ConfigMap, apiVersion: v1}\n  - {kind: Secret, apiVersion: v1}\n"
    docs = _docs(text)
    assert [d.data["kind"] for d in docs] == ["ConfigMap", "Secret"]
    assert [d.prefix for d in docs] == ["/items/0", "/items/1"]


def test_parts_agree_with_whole_file_parsing():
    text = "# head\n" + "".join(f"---\nname: doc{i}\nlist: [1, 2]\n" for i in range(40))
    whole = [(d.index, d.line, d.data) for d in _docs(text)]
    pieces = []
    for index, line, part in documents.parts(text, 200):
        pieces.extend((d.index, d.line, d.data) for d in documents.documents("f.yaml", part, index, line))
    assert pieces == whole
    assert len(documents.parts(text, 200)) > 3


def test_expand_finds_yaml_and_json_recursively(tmp_path):
    (tmp_path / "a.yaml").write_text("a: 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text("b: 1\n")
    (tmp_path / "sub" / "c.json").write_text("{}")
    (tmp_path / "sub" / "notes.txt").write_text("x")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.yaml").write_text("d: 1\n")
    found = documents.expand([str(tmp_path), "-"])
    assert [p.replace(str(tmp_path), "") for p in found[:-1]] == ["/a.yaml", "/sub/b.yml", "/sub/c.json"]
    assert found[-1] == "-"


def test_non_utf8_files_are_a_finding(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"a: 1\nb: \xff\xfe\n")
    text, problem = documents.read(str(path))
    assert text is None and problem.rule == "yaml-syntax" and problem.line == 2


# A TrainJob in JSON whose trainer env value escapes an unpaired UTF-16 surrogate (\ud800).
SURROGATE_ENV = ('{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",\n'
                 ' "metadata": {"name": "job", "namespace": "team-a"},\n'
                 ' "spec": {"trainer": {"env": [\n'
                 '   {"name": "GREETING", "value": "hi \\ud800 there"}]}}}\n')


def test_a_lone_surrogate_in_a_json_value_is_a_warning_and_validated_as_the_api_server_stores_it():
    [doc] = _docs(SURROGATE_ENV, "job.json")
    # the API server's JSON decoder stores U+FFFD and accepts the object: the rest is validated as stored
    assert doc.data["spec"]["trainer"]["env"][0]["value"] == "hi \ufffd there"
    [problem] = doc.problems
    assert (problem.rule, problem.severity, problem.path, problem.line) == (
        "invalid-text", "warning", "/spec/trainer/env/0/value", 4)
    # every value that held one is named, and lines still resolve
    both = SURROGATE_ENV.replace('"job"', '"job\\udc00"')
    [doc] = _docs(both, "job.json")
    assert doc.data["metadata"]["name"] == "job\ufffd"  # the name's own format check rejects U+FFFD
    assert [(p.path, p.line, p.severity) for p in doc.problems] == [
        ("/metadata/name", 2, "warning"), ("/spec/trainer/env/0/value", 4, "warning")]


def test_a_lone_surrogate_in_a_key_or_a_byte_that_is_not_utf8_is_an_error():
    key = SURROGATE_ENV.replace('"GREETING", "value": "hi \\ud800 there"', '"GREETING", "v\\ud800": "x"')
    [doc] = _docs(key, "job.json")
    [problem] = doc.problems
    assert doc.data is None and (problem.rule, problem.severity) == ("invalid-text", "error")
    raw = SURROGATE_ENV.replace("\\ud800", "\udced")  # how a byte that is not UTF-8 reads (surrogateescape)
    [doc] = _docs(raw, "job.json")
    assert doc.data is None and doc.problems[0].severity == "error" and "byte 0xED" in doc.problems[0].message
