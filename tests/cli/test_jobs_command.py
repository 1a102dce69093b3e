"""``mariana jobs JOB``: one job's config keys, as text and as JSON (issue 52, item 7)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import one_error_line

from mariana.jobs import BUILTIN_JOBS, get_job

pytestmark = pytest.mark.timeout(120)


def test_jobs_job_shows_that_jobs_keys(mariana):
    proc = mariana("jobs", "dnn-dp")
    assert proc.returncode == 0, proc.stderr
    job = get_job("dnn-dp")
    lines = proc.stdout.splitlines()
    assert lines[0] == f"dnn-dp: {job.description}"
    keyed = [line.strip() for line in lines if line.startswith("    ")]
    assert [line.split(" = ", 1)[0] for line in keyed] == [k.name for k in job.keys]
    by_name = dict(zip((k.name for k in job.keys), keyed))
    assert by_name["lr"] == f"lr = 0.05  [float]  {job.key_index['lr'].help}"
    assert "(one of: sgd, momentum" in by_name["optimizer"]
    assert "(>= 1)" in by_name["keep_checkpoints"]
    assert not any(line.startswith("pagerank:") for line in lines)  # that job only
    assert "--set KEY=VALUE" in lines[-1] and "[dnn-dp]" in lines[-1]


def test_jobs_job_json_is_one_object(mariana):
    proc = mariana("jobs", "pagerank", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    job = get_job("pagerank")
    assert doc["name"] == "pagerank" and doc["description"] == job.description
    assert [k["name"] for k in doc["keys"]] == [k.name for k in job.keys]
    keys = {k["name"]: k for k in doc["keys"]}
    assert keys["damping"] == {"name": "damping", "type": "float", "default": 0.85, "help": job.key_index["damping"].help}
    assert keys["mode"]["choices"] == ["block", "vertex"]
    assert keys["checkpoint_every"]["minimum"] == 0


def test_jobs_of_a_job_module(mariana, tmp_path):
    (tmp_path / "myjob.py").write_text(
        "from mariana.engine import Graph\nfrom mariana.jobs import Job, Key\n"
        "JOB = Job('mine', 'my own job', (Key('size', 3, 'int', 'how many'),), lambda c, b: Graph())\n")
    proc = mariana("jobs", "myjob:JOB", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["name"] == "mine" and doc["keys"][0] == {"name": "size", "type": "int", "default": 3, "help": "how many"}


@pytest.mark.parametrize("name,hint", [("dnn-pd", "did you mean 'dnn-dp'?"), ("nosuch", "jobs: ")])
def test_an_unknown_job_is_one_line_listing_the_jobs(mariana, name, hint):
    line = one_error_line(mariana("jobs", name), f"unknown job '{name}'", hint)
    assert all(j in line for j in BUILTIN_JOBS)


def test_jobs_without_a_job_still_lists_every_job(mariana):
    proc = mariana("jobs", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [j["name"] for j in json.loads(proc.stdout)] == list(BUILTIN_JOBS)
