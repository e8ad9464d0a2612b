"""schemathesis hooks for .ci/contract: the two cross-field rules of saldo's API that JSON Schema
cannot state, so that generated "valid" bodies are valid. Each rule is stated in the document's
descriptions too; everything else the server checks is in the schema itself.

- a transfer moves money between two different accounts (`from` != `to`);
- a product repeated in one order is summed, and the sum has the per-product limit (the
  `maximum` of `ItemRequest.quantity`, read from the served document, never repeated here).
"""

import json
import os
import sys

import schemathesis

with open(os.environ["SALDO_CONTRACT_DOCUMENT"], encoding="utf-8") as f:
    _DOC = json.load(f)
MAX_QUANTITY = _DOC["components"]["schemas"]["ItemRequest"]["properties"]["quantity"]["maximum"]
ORDER_BODIES = {("POST", "/v1/reservations"), ("POST", "/v1/orders/{order_id}/rereserve")}


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


def _keeps_cross_field_rules(operation, body):
    if operation is None or not isinstance(body, dict):
        return True
    key = (operation.method.upper(), operation.path)
    if key == ("POST", "/v1/transfers"):
        return "from" not in body or body.get("from") != body.get("to")
    if key in ORDER_BODIES and isinstance(body.get("items"), list):
        return _sums_within_limit(body["items"])
    return True


@schemathesis.hook
def filter_body(context, body):
    """Generated bodies keep the rules (fuzzing and stateful phases)."""
    return _keeps_cross_field_rules(context.operation, body)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """The coverage phase builds bodies without the filter: a 422 answered to a body that
    breaks one of these rules is the server being right, not a schema-valid body refused."""
    broke_rule = not _keeps_cross_field_rules(case.operation, case.body)
    if broke_rule and response.status_code == 422:
        print(f"contract: expected 422 for a body breaking a cross-field rule: "
              f"{case.operation.method.upper()} {case.operation.path} {json.dumps(case.body)[:200]}",
              file=sys.stderr)
        return False
    return True
