"""Activities of the ticket triage sample, unchanged by the port.

From temporalio/samples-python, ``langfuse_tracing/ticket_triage/activities.py`` (MIT License,
Copyright (c) 2022 Temporal Technologies Inc.). The dataclasses and ``lookup_account`` are the
sample's; the two OpenAI calls (``classify_ticket``, ``draft_reply``) are replaced by
deterministic stand-ins that count their calls, so the example runs offline and a test can see
which model calls were paid for. Nothing in this file changes when the workflow is ported.
"""

from dataclasses import dataclass

from temporalio import activity

#: Model calls made, by activity (the stand-ins' bill).
CALLS: dict[str, int] = {"classify_ticket": 0, "draft_reply": 0, "lookup_account": 0}


@dataclass
class Ticket:
    ticket_id: str
    customer_email: str
    subject: str
    body: str


@dataclass
class Classification:
    category: str
    priority: str


@dataclass
class AccountInfo:
    customer_email: str
    account_name: str
    plan: str


@dataclass
class DraftReplyInput:
    ticket: Ticket
    classification: Classification
    account: AccountInfo


@dataclass
class ApprovalDecision:
    approved: bool
    reviewer: str


@dataclass
class TriageResult:
    status: str
    classification: Classification
    reply: str | None = None


@activity.defn
async def classify_ticket(ticket: Ticket) -> Classification:
    CALLS["classify_ticket"] += 1
    text = f"{ticket.subject} {ticket.body}".lower()   # stand-in for the model call
    category = "billing" if ("charge" in text or "invoice" in text) else "other"
    return Classification(category=category, priority="high" if "twice" in text else "normal")


@activity.defn
async def lookup_account(customer_email: str) -> AccountInfo:
    CALLS["lookup_account"] += 1
    known_accounts = {
        "ada@acme.example": AccountInfo(
            customer_email="ada@acme.example",
            account_name="Acme Corp",
            plan="enterprise",
        ),
    }
    return known_accounts.get(
        customer_email,
        AccountInfo(customer_email=customer_email, account_name="Unknown", plan="free"),
    )


@activity.defn
async def draft_reply(input: DraftReplyInput) -> str:
    CALLS["draft_reply"] += 1
    return (f"Dear {input.account.account_name} ({input.account.plan}): about "   # stand-in
            f"\"{input.ticket.subject}\" ({input.classification.category}, "
            f"{input.classification.priority}) - {input.ticket.body[:40]}")
