import type { ToolCallFieldsFragment as ToolCall } from '../gql/graphql';

/** JSON text pretty-printed; anything else as it is. */
export function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function sameJson(a: string, b: string): boolean {
  try {
    return JSON.stringify(JSON.parse(a)) === JSON.stringify(JSON.parse(b));
  } catch {
    return a === b;
  }
}

export type ApprovalOutcome =
  | { kind: 'waiting'; label: string; detail?: string }
  | { kind: 'approved' | 'edited' | 'rejected' | 'withdrawn'; label: string; detail?: string };

/**
 * What became of a call that needed approval, as ToolCall.approval says: approved (as
 * asked, or with edited arguments), rejected (with the reason given), withdrawn undecided
 * (expired, stopped, …), or still waiting. Null for a call that needed none.
 */
export function approvalOutcome(call: Pick<ToolCall, 'arguments' | 'status' | 'approval'>): ApprovalOutcome | null {
  const a = call.approval;
  if (!a) return null;
  if (a.decision === 'APPROVE') {
    return sameJson(call.arguments, a.requestedArguments)
      ? { kind: 'approved', label: 'approved' }
      : { kind: 'edited', label: 'approved with edits' };
  }
  if (a.decision === 'REJECT') {
    return { kind: 'rejected', label: 'rejected', detail: a.reason ? `Rejected: ${a.reason}` : 'Rejected without a reason.' };
  }
  if (call.status === 'AWAITING_APPROVAL') return { kind: 'waiting', label: 'awaiting approval' };
  return { kind: 'withdrawn', label: `withdrawn: ${a.reason ?? 'no decision'}`, detail: withdrawnSentence(a.reason) };
}

function withdrawnSentence(reason: string | null | undefined): string {
  switch (reason) {
    case 'expired':
      return 'Not run: nobody decided before it expired.';
    case 'stopped':
      return 'Not run: the agent was stopped before a decision.';
    case 'interrupted':
      return 'Not run: a newer message interrupted the agent.';
    default:
      return `Not run: ${reason ?? 'it was withdrawn before a decision'}.`;
  }
}
