"""schemathesis hooks for .ci/contract: the cross-field rules of saldo's API that JSON Schema
cannot state, so that generated "valid" bodies are valid. Each rule is stated in the document's
descriptions too; everything else the server checks is in the schema itself.

- a transfer moves money between two different accounts (`from` != `to`);
- `timeout_s` is only for a hold (`"pending": true`);
- the transfers of one linked group have distinct ids;
- an account's opening balance lies within its own limits (`min_balance` ..= `max_balance`);
- a product repeated in one order is summed, and the sum has the per-product limit (the
  `maximum` of `ItemRequest.quantity`, read from the served document, never repeated here);
- a product repeated in one reservation names one location or none (every line the same
  `location_id`, absent and null alike);
- a return names each product once (its items are per product, not summed);
- a move changes the state or the location of its units (`from` != `to`, an absent and a null
  `location_id` alike);
- a bundle's components sum within the per-product limit like an order's lines, and never
  name the bundle itself (the path's `product_id`: a generated body cannot know it, so that
  422 `invalid-input` is dropped as the server being right).

And the refusals of a webhook subscription that depend on the world, not the body's shape: its
URL must parse as http(s) and resolve to an address the service may send to (no network here,
and no private address without `--webhook-allow-private-targets`: 422 `webhook-target-refused`
or `invalid-input`), `after` may not be past the feed's end (422 `cursor-invalid`), and at most
100 may exist (409 `too-many-webhooks`). A schema cannot state those; the server answering them
is right.

And a transfer search cursor (`GET /v1/transfers?cursor=`) or a statement's
(`GET /v1/accounts/{id}/entries?cursor=`, `GET /v1/products/{product_id}/movements?cursor=`)
the server never handed out for the filters (the account or product and the time range) it
comes with: the cursor carries a digest of its filters, which
the schema's pattern can state only as hex digits, so a generated one is (almost always) another
search's or statement's: 422 `cursor-invalid`, the server being right.
"""

import json
import os
import sys

import schemathesis
# The failure positive_data_acceptance reports (schemathesis is pinned in .ci/contract).
from schemathesis.openapi.checks import RejectedPositiveData

with open(os.environ["SALDO_CONTRACT_DOCUMENT"], encoding="utf-8") as f:
    _DOC = json.load(f)
MAX_QUANTITY = _DOC["components"]["schemas"]["ItemRequest"]["properties"]["quantity"]["maximum"]
ORDER_BODIES = {("POST", "/v1/reservations"), ("POST", "/v1/orders/{order_id}/rereserve")}
WEBHOOK_CREATE = ("POST", "/v1/admin/webhooks")
WEBHOOK_REFUSALS = {
    (422, "urn:saldo:problem:webhook-target-refused"),
    (422, "urn:saldo:problem:invalid-input"),
    (422, "urn:saldo:problem:cursor-invalid"),
    (409, "urn:saldo:problem:too-many-webhooks"),
}
# The lists whose cursors carry a digest of their filters.
FILTERED_LISTS = {
    ("GET", "/v1/transfers"),
    ("GET", "/v1/accounts/{id}/entries"),
    ("GET", "/v1/products/{product_id}/movements"),
}
RETURN_BODY = ("POST", "/v1/orders/{order_id}/returns")
MOVE_BODY = ("POST", "/v1/products/{product_id}/moves")
BUNDLE_BODY = ("PUT", "/v1/products/{product_id}/bundle")


def _sums_within_limit(items):
    sums = {}
    for item in items:
        if not isinstance(item, dict):
            return True
        product, quantity = item.get("product_id"), item.get("quantity")
        if not isinstance(product, (int, float)) or not isinstance(quantity, (int, float)):
            return True
        sums[product] = sums.get(product, 0) + quantity
    return all(total <= MAX_QUANTITY for total in sums.values())


def _one_location_per_product(items):
    seen = {}
    for item in items:
        if not isinstance(item, dict):
            return True
        product = item.get("product_id")
        # 1 and 1.0 are one product (integral floats are integers) and one dict key.
        product = product if isinstance(product, (int, float)) else json.dumps(product)
        location = item.get("location_id")
        if seen.setdefault(product, location) != location:
            return False
    return True


def _each_product_once(items):
    products = [json.dumps(i.get("product_id")) for i in items if isinstance(i, dict)]
    return len(products) == len(set(products))


def _place(place):
    if not isinstance(place, dict):
        return json.dumps(place)
    return json.dumps([place.get("state"), place.get("location_id")])


def _move_goes_somewhere(body):
    return _place(body.get("from")) != _place(body.get("to"))


def _transfer_keeps_rules(transfer):
    if not isinstance(transfer, dict):
        return True
    if "from" in transfer and transfer.get("from") == transfer.get("to"):
        return False
    return transfer.get("timeout_s") is None or transfer.get("pending") is True


def _number(value, default):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _opening_within_limits(body):
    opening = _number(body.get("opening_balance"), 0)
    low = _number(body.get("min_balance"), 0)
    high = _number(body.get("max_balance"), None)
    return low <= opening and (high is None or opening <= high)


def _keeps_cross_field_rules(operation, body):
    if operation is None or not isinstance(body, dict):
        return True
    key = (operation.method.upper(), operation.path)
    if key == ("POST", "/v1/transfers"):
        return _transfer_keeps_rules(body)
    if key == ("POST", "/v1/transfer-groups") and isinstance(body.get("transfers"), list):
        transfers = body["transfers"]
        ids = [t.get("id") for t in transfers if isinstance(t, dict) and "id" in t]
        distinct = len(ids) == len(set(map(json.dumps, ids)))
        return distinct and all(_transfer_keeps_rules(t) for t in transfers)
    if key == ("POST", "/v1/accounts"):
        return _opening_within_limits(body)
    if key in ORDER_BODIES and isinstance(body.get("items"), list):
        return _sums_within_limit(body["items"]) and _one_location_per_product(body["items"])
    if key == RETURN_BODY and isinstance(body.get("items"), list):
        return _each_product_once(body["items"])
    if key == MOVE_BODY:
        return _move_goes_somewhere(body)
    if key == BUNDLE_BODY and isinstance(body.get("components"), list):
        return _sums_within_limit(body["components"])
    return True


@schemathesis.hook
def filter_body(context, body):
    """Generated bodies keep the rules (fuzzing and stateful phases)."""
    return _keeps_cross_field_rules(context.operation, body)


def _is_expected_refusal(failure, case, response):
    """A 422 answered to a body that breaks one of these rules, reported as "a schema-valid
    request rejected" (positive_data_acceptance): the server being right."""
    return (isinstance(failure, RejectedPositiveData)
            and failure.status_code == 422
            and response.status_code == 422
            and not _keeps_cross_field_rules(case.operation, case.body))


def _problem_type(response):
    try:
        return response.json().get("type")
    except Exception:  # not JSON: not one of ours
        return None


def _is_foreign_search_cursor(failure, case, response):
    """A transfer search's or a statement's cursor of other filters (see the module's header),
    reported as a schema-valid request rejected."""
    return (isinstance(failure, RejectedPositiveData)
            and case.operation is not None
            and (case.operation.method.upper(), case.operation.path) in FILTERED_LISTS
            and response.status_code == 422
            and _problem_type(response) == "urn:saldo:problem:cursor-invalid")


def _is_webhook_refusal(failure, case, response):
    """A subscription refused for what the world says of its URL or of the feed (see the
    module's header), reported as a schema-valid request rejected."""
    if not isinstance(failure, RejectedPositiveData) or case.operation is None:
        return False
    if (case.operation.method.upper(), case.operation.path) != WEBHOOK_CREATE:
        return False
    return (response.status_code, _problem_type(response)) in WEBHOOK_REFUSALS


def _is_bundle_of_itself(failure, case, response):
    """A bundle declared with itself among its components (the path's product in the body),
    reported as a schema-valid request rejected."""
    if not isinstance(failure, RejectedPositiveData) or case.operation is None:
        return False
    if (case.operation.method.upper(), case.operation.path) != BUNDLE_BODY:
        return False
    bundle = _as_id((getattr(case, "path_parameters", None) or {}).get("product_id"))
    body = case.body if isinstance(case.body, dict) else {}
    components = body.get("components") if isinstance(body.get("components"), list) else []
    named = [_as_id(c.get("product_id")) for c in components if isinstance(c, dict)]
    return (response.status_code == 422
            and _problem_type(response) == "urn:saldo:problem:invalid-input"
            and bundle is not None and bundle in named)


def _as_id(value):
    """A product id as the server reads it (a path segment is text; 1.0 is 1), else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """The coverage phase builds bodies without the filter, so a body breaking a rule gets its
    422 and the positive-data check calls that a rejection: that one failure is dropped. Every
    other check's failure on the same response (its schema, its content type, …) is kept."""
    if _is_expected_refusal(failure, case, response):
        print(f"contract: expected 422 for a body breaking a cross-field rule: "
              f"{case.operation.method.upper()} {case.operation.path} {json.dumps(case.body)[:200]}",
              file=sys.stderr)
        return False
    if _is_foreign_search_cursor(failure, case, response):
        print(f"contract: expected 422 for a search cursor of other filters: {case.query}",
              file=sys.stderr)
        return False
    if _is_bundle_of_itself(failure, case, response):
        print(f"contract: expected 422 for a bundle of itself: {case.path_parameters} "
              f"{json.dumps(case.body)[:200]}", file=sys.stderr)
        return False
    if _is_webhook_refusal(failure, case, response):
        print(f"contract: expected refusal of a webhook subscription: {response.status_code} "
              f"{json.dumps(case.body)[:200]}", file=sys.stderr)
        return False
    return True
