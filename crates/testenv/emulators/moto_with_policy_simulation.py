"""moto_server with IAM's SimulatePrincipalPolicy, which moto lacks.

`blockwork check` proves a principal's IAM policy sufficient for the operator's writes without
writing: it asks IAM to simulate them (iam:SimulatePrincipalPolicy), as a user would with
`aws iam simulate-principal-policy`. moto stores users, roles, groups and their policies, and has
a policy evaluator of its own (moto.iam.access_control, used when moto enforces IAM), but no
handler for the simulation. This adds one, built from moto's own parts only:

- the caller is authorized as moto authorizes every action when it enforces IAM (the request's
  signature, then the caller's policies for iam:SimulatePrincipalPolicy on the principal's ARN),
  so an identity without that permission gets AccessDenied, as from AWS. Other actions stay
  unenforced, as in the plain moto the tests use;
- the principal's policies are the ones moto itself would apply to a request of that principal
  (inline, attached, and for a user its groups': moto's IAMUserAccessKey/AssumedRoleAccessKey
  `collect_policies`);
- each action on each resource is evaluated by moto's IAMPolicy with the request's context
  entries as condition values: an explicit Deny wins, then an Allow, else implicitDeny.

Where moto's evaluator differs from AWS's, this inherits it: of the condition operators only
StringEquals is evaluated (others count as met), and permissions boundaries, SCPs and
resource policies are not applied. Run as moto_server is: `python3 THIS -H HOST -p PORT`.
"""

import sys

from werkzeug.exceptions import HTTPException

from moto.core.responses import ActionResult
from moto.iam.access_control import (
    AssumedRoleAccessKey,
    IAMPolicy,
    IAMRequest,
    IAMUserAccessKey,
    PermissionResult,
)
from moto.iam.exceptions import IAMException, NoSuchEntity
from moto.iam.responses import IamResponse
from moto.server import main
from moto.utilities.utils import get_partition


class _CallerRefused(IAMException):
    """moto's authorizer raises a generic REST error whose XML the AWS SDKs for Rust cannot
    read; AWS answers IAM's refusals as IAM errors (`<ErrorResponse><Error><Code>`), which is
    what moto writes for an IAMException."""

    def __init__(self, code, message):
        self.code = code
        super().__init__(message)


def _members(querystring, prefix):
    """`Prefix.member.N` query parameters, in N's order."""
    found = []
    for key, values in querystring.items():
        if key.startswith(prefix + ".member.") and key[len(prefix) + 8 :].isdigit():
            found.append((int(key[len(prefix) + 8 :]), values[0]))
    return [value for _, value in sorted(found)]


def _context(querystring):
    """ContextEntries as moto's evaluator takes condition values: key -> value (the first)."""
    values = {}
    index = 1
    while f"ContextEntries.member.{index}.ContextKeyName" in querystring:
        name = querystring[f"ContextEntries.member.{index}.ContextKeyName"][0]
        given = _members(querystring, f"ContextEntries.member.{index}.ContextKeyValues")
        if given:
            values[name] = given[0]
        index += 1
    return values


def _principal_policies(account_id, partition, arn):
    """The policies moto applies to a request of the user or role `arn`; NoSuchEntity if none."""
    kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
    name = path_and_name.rsplit("/", 1)[-1]
    if kind == "user":
        principal = IAMUserAccessKey.__new__(IAMUserAccessKey)
        principal._owner_user_name = name
    elif kind == "role":
        principal = AssumedRoleAccessKey.__new__(AssumedRoleAccessKey)
        principal._owner_role_name = name
    else:
        raise NoSuchEntity(f"The principal {arn} is not a user or role")
    principal.account_id = account_id
    principal.partition = partition
    if kind == "user":
        principal.backend.get_user(name)
    else:
        principal.backend.get_role_by_arn(arn)
    return principal.collect_policies()


def _decision(policies, action, resource, context):
    decision = "implicitDeny"
    for policy in policies:
        result = IAMPolicy(policy).is_action_permitted(action, resource, None, context)
        if result == PermissionResult.DENIED:
            return "explicitDeny"
        if result == PermissionResult.PERMITTED:
            decision = "allowed"
    return decision


def simulate_principal_policy(self):
    arn = self._get_param("PolicySourceArn")
    caller = IAMRequest(
        account_id=self.current_account,
        method=self.method,
        path=self.raw_path,
        data=self.data,
        body=self.raw_body,
        headers=self.headers,
        action="SimulatePrincipalPolicy",
    )
    try:
        caller.check_signature()
        caller.check_action_permitted(arn)
    except HTTPException as refused:
        raise _CallerRefused(getattr(refused, "error_type", "AccessDenied"), getattr(refused, "message", str(refused)))
    policies = _principal_policies(self.current_account, get_partition(self.region), arn)
    context = _context(self.querystring)
    results = [
        {"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": _decision(policies, action, resource, context)}
        for action in _members(self.querystring, "ActionNames")
        for resource in (_members(self.querystring, "ResourceArns") or ["*"])
    ]
    return ActionResult({"EvaluationResults": results, "IsTruncated": False})


IamResponse.simulate_principal_policy = simulate_principal_policy

if __name__ == "__main__":
    main(sys.argv[1:])
