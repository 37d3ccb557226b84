import type { BusyPolicy } from '../gql/graphql';

/** What a message does while the agent works, as the settings and the message box name it. */
export const BUSY_POLICIES: { value: BusyPolicy; label: string; help: string }[] = [
  { value: 'INTERRUPT', label: 'Interrupt', help: 'A new message stops the agent, keeps its partial reply, and starts over.' },
  { value: 'ENQUEUE', label: 'Queue', help: 'A new message waits until the agent is done.' },
  { value: 'STEER', label: 'Steer', help: 'A new message goes to the working agent at its next step, which takes it into account.' },
  { value: 'REJECT', label: 'Reject', help: 'New messages are refused while the agent works.' },
];

export function busyPolicyLabel(policy: BusyPolicy): string {
  return BUSY_POLICIES.find((p) => p.value === policy)?.label ?? policy;
}

/** The choices for one message, next to Send: the chat's policy, or one of these. */
export const MESSAGE_POLICIES: { value: BusyPolicy; label: string }[] = [
  { value: 'INTERRUPT', label: 'Send now (stop the agent)' },
  { value: 'ENQUEUE', label: 'Queue it' },
  { value: 'STEER', label: 'Steer the agent' },
];
