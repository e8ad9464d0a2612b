"""The failure filter of .ci/contract_hooks.py, run by .ci/contract with its venv (the pinned
schemathesis) before the service starts: of the failures reported for a 422 answered to a body
that breaks a cross-field rule, only the positive-data check's rejection is dropped; every
other failure, and that rejection for any other body or status, is kept.

Usage: python .ci/contract_hooks_test.py  (exits non-zero on a failure)
"""

import json
import os
import sys
import tempfile
import unittest
from types import SimpleNamespace

from schemathesis.openapi.checks import MissingContentType, RejectedPositiveData, UndefinedStatusCode


def _load_hooks():
    # The hooks read the served document's per-product limit at import.
    doc = {"components": {"schemas": {"ItemRequest": {"properties": {"quantity": {"maximum": 10}}}}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "openapi.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.environ["SALDO_CONTRACT_DOCUMENT"] = path
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import contract_hooks
    return contract_hooks


HOOKS = _load_hooks()
OPERATION = SimpleNamespace(method="post", path="/v1/transfers")
SAME_ACCOUNT = {"id": "t-1", "from": 1, "to": 1, "amount": 5}  # breaks from != to
TWO_ACCOUNTS = {"id": "t-2", "from": 1, "to": 2, "amount": 5}


def case(body):
    return SimpleNamespace(operation=OPERATION, body=body)


def answered(status):
    return SimpleNamespace(status_code=status)


def rejected(status):
    return RejectedPositiveData(operation="POST /v1/transfers", message="rejected",
                                status_code=status, allowed_statuses=["2xx"])


def kept(failure, body, status):
    return HOOKS.filter_failure(None, failure, case(body), answered(status))


class FilterFailure(unittest.TestCase):
    def test_the_expected_422_for_a_body_breaking_a_rule_is_dropped(self):
        self.assertFalse(kept(rejected(422), SAME_ACCOUNT, 422))

    def test_other_checks_failures_on_that_response_are_kept(self):
        undocumented = UndefinedStatusCode(operation="POST /v1/transfers", status_code=422,
                                           defined_status_codes=["201"], allowed_status_codes=[201],
                                           message="undocumented")
        no_type = MissingContentType(operation="POST /v1/transfers", media_types=[],
                                     message="no content type")
        self.assertTrue(kept(undocumented, SAME_ACCOUNT, 422))
        self.assertTrue(kept(no_type, SAME_ACCOUNT, 422))

    def test_a_rejection_of_a_body_keeping_the_rules_is_kept(self):
        self.assertTrue(kept(rejected(422), TWO_ACCOUNTS, 422))

    def test_a_rejection_with_another_status_is_kept(self):
        self.assertTrue(kept(rejected(400), SAME_ACCOUNT, 400))
        self.assertTrue(kept(rejected(500), SAME_ACCOUNT, 500))

    def test_a_return_naming_a_product_twice_breaks_a_rule(self):
        returns = SimpleNamespace(method="post", path="/v1/orders/{order_id}/returns")
        twice = {"return_id": "r-1", "reason": "x",
                 "items": [{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 1}]}
        once = dict(twice, items=twice["items"][:1])
        self.assertFalse(HOOKS._keeps_cross_field_rules(returns, twice))
        self.assertTrue(HOOKS._keeps_cross_field_rules(returns, once))


BUNDLE = SimpleNamespace(method="put", path="/v1/products/{product_id}/bundle")


class BundleOfItself(unittest.TestCase):
    def kept(self, bundle, components, response):
        body = {"components": [{"product_id": c, "quantity": 1} for c in components]}
        case = SimpleNamespace(operation=BUNDLE, body=body,
                               path_parameters={"product_id": bundle})
        return HOOKS.filter_failure(None, rejected(422), case, response)

    def test_a_bundle_naming_itself_is_dropped(self):
        self.assertFalse(self.kept(1, [2, 1], problem(422, "invalid-input")))

    def test_anything_else_is_kept(self):
        self.assertTrue(self.kept(1, [2, 3], problem(422, "invalid-input")))
        self.assertTrue(self.kept(1, [1], problem(422, "invalid-body")))

    def test_components_sum_within_the_limit(self):
        over = {"components": [{"product_id": 2, "quantity": 6}, {"product_id": 2, "quantity": 5}]}
        self.assertFalse(HOOKS._keeps_cross_field_rules(BUNDLE, over))
        self.assertTrue(HOOKS._keeps_cross_field_rules(BUNDLE, {"components": over["components"][:1]}))


WEBHOOKS = SimpleNamespace(method="post", path="/v1/admin/webhooks")


def problem(status, kind):
    return SimpleNamespace(status_code=status, json=lambda: {"type": f"urn:saldo:problem:{kind}"})


def kept_webhook(failure, response):
    return HOOKS.filter_failure(None, failure, SimpleNamespace(operation=WEBHOOKS,
                                                               body={"url": "x"}), response)


class WebhookRefusals(unittest.TestCase):
    def test_refusals_the_world_decides_are_dropped(self):
        self.assertFalse(kept_webhook(rejected(422), problem(422, "webhook-target-refused")))
        self.assertFalse(kept_webhook(rejected(422), problem(422, "invalid-input")))
        self.assertFalse(kept_webhook(rejected(422), problem(422, "cursor-invalid")))
        self.assertFalse(kept_webhook(rejected(409), problem(409, "too-many-webhooks")))

    def test_anything_else_is_kept(self):
        self.assertTrue(kept_webhook(rejected(422), problem(422, "invalid-body")))
        self.assertTrue(kept_webhook(rejected(500), problem(500, "internal")))
        undocumented = UndefinedStatusCode(operation="POST /v1/admin/webhooks", status_code=422,
                                           defined_status_codes=["201"], allowed_status_codes=[201],
                                           message="undocumented")
        self.assertTrue(kept_webhook(undocumented, problem(422, "webhook-target-refused")))


SEARCH = SimpleNamespace(method="get", path="/v1/transfers")


def kept_search(failure, response):
    return HOOKS.filter_failure(None, failure, SimpleNamespace(operation=SEARCH, body=None,
                                                               query={"cursor": "t0"}), response)


class SearchCursors(unittest.TestCase):
    def test_a_cursor_of_other_filters_is_dropped(self):
        self.assertFalse(kept_search(rejected(422), problem(422, "cursor-invalid")))
        statement = SimpleNamespace(method="get", path="/v1/accounts/{id}/entries")
        self.assertFalse(HOOKS.filter_failure(
            None, rejected(422), SimpleNamespace(operation=statement, body=None,
                                                 query={"cursor": "e0"}),
            problem(422, "cursor-invalid")))

    def test_anything_else_is_kept(self):
        self.assertTrue(kept_search(rejected(422), problem(422, "invalid-input")))
        self.assertTrue(kept_search(rejected(500), problem(500, "internal")))
        # The same refusal of another operation on the same path is kept.
        self.assertTrue(HOOKS.filter_failure(None, rejected(422), case(TWO_ACCOUNTS),
                                             problem(422, "cursor-invalid")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
