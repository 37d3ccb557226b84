import { describe, expect, it } from 'vitest';
import { approvalOutcome } from './approval';
import { safeHref } from './links';

describe('links in replies', () => {
  it('keep http(s) and mailto', () => {
    expect(safeHref('https://example.com/a?b=c')).toBe('https://example.com/a?b=c');
    expect(safeHref(' http://example.com ')).toBe('http://example.com');
    expect(safeHref('mailto:someone@example.com')).toBe('mailto:someone@example.com');
  });
  it('drop everything else', () => {
    for (const url of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', 'data:text/html,<b>x</b>', 'vbscript:x', '#/c/123', '/auth/guest', '//evil.example', 'file:///etc/passwd', 'https:/broken']) {
      expect(safeHref(url), url).toBeNull();
    }
  });
});

describe('what became of a call that needed approval', () => {
  const approval = (over: object) => ({ requestedArguments: '{"text":"a"}', decision: null, reason: null, decidedAt: null, expiresAt: '2030-01-01T00:00:00Z', ...over });
  it('reads ToolCall.approval', () => {
    expect(approvalOutcome({ arguments: '{}', status: 'COMPLETED', approval: null })).toBeNull();
    expect(approvalOutcome({ arguments: '{"text":"a"}', status: 'AWAITING_APPROVAL', approval: approval({}) })?.kind).toBe('waiting');
    expect(approvalOutcome({ arguments: '{ "text": "a" }', status: 'COMPLETED', approval: approval({ decision: 'APPROVE', decidedAt: 'x' }) })?.kind).toBe('approved');
    expect(approvalOutcome({ arguments: '{"text":"b"}', status: 'COMPLETED', approval: approval({ decision: 'APPROVE', decidedAt: 'x' }) })).toMatchObject({ kind: 'edited', label: 'approved with edits' });
    expect(approvalOutcome({ arguments: '{"text":"a"}', status: 'REJECTED', approval: approval({ decision: 'REJECT', reason: 'no', decidedAt: 'x' }) })).toMatchObject({ kind: 'rejected', detail: 'Rejected: no' });
    expect(approvalOutcome({ arguments: '{"text":"a"}', status: 'CANCELLED', approval: approval({ reason: 'expired' }) })).toMatchObject({ kind: 'withdrawn', label: 'withdrawn: expired' });
    expect(approvalOutcome({ arguments: '{"text":"a"}', status: 'CANCELLED', approval: approval({ reason: 'stopped' }) })?.label).toBe('withdrawn: stopped');
  });
});
