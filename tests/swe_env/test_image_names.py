"""The official SWE-bench image names the docker backend asks for: the harness's own naming."""

from __future__ import annotations

import pytest

from swe_env.sandbox.docker import swebench_arch, swebench_image


def test_known_names():
    assert swebench_image("pylint-dev__astroid-1268", arch="x86_64") == (
        "swebench/sweb.eval.x86_64.pylint-dev_1776_astroid-1268:latest"
    )
    assert (
        swebench_image("Django__Django-11099", arch="arm64")
        == "swebench/sweb.eval.arm64.django_1776_django-11099:latest"
    )
    assert swebench_arch("aarch64") == "arm64" and swebench_arch("x86_64") == "x86_64"


@pytest.mark.parametrize("instance_id", ["sqlfluff__sqlfluff-2386", "pydicom__pydicom-1458", "sympy__sympy-20590"])
def test_same_as_swebench_testspec(instance_id):
    test_spec = pytest.importorskip("swebench.harness.test_spec.test_spec")
    spec = test_spec.TestSpec(
        instance_id=instance_id, repo="", version="", repo_script_list=[], eval_script_list=[], env_script_list=[],
        arch="x86_64", FAIL_TO_PASS=[], PASS_TO_PASS=[], language="py", docker_specs={}, namespace="swebench",
    )  # fmt: skip
    assert swebench_image(instance_id, arch="x86_64") == spec.instance_image_key
