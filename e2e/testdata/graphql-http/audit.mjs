// Runs graphql-http's server audits (the GraphQL-over-HTTP conformance suite) against the
// URL given as the first argument, one audit at a time, and prints the results as one JSON
// array of {id, name, status, reason, httpStatus, body} on stdout ("ok", or "notice",
// "warn", "error" for an audit that did not pass). With AUDIT_TOKEN set every request
// carries "Authorization: Bearer <token>". e2e/graphqlhttp_test.go runs it.
import { serverAudits } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node audit.mjs <url of /query>');
  process.exit(2);
}
const token = process.env.AUDIT_TOKEN;
const fetchFn = (input, init = {}) => {
  if (!token) return fetch(input, init);
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const results = [];
for (const audit of serverAudits({ url, fetchFn })) {
  const r = await audit.fn();
  const out = { id: r.id, name: r.name, status: r.status };
  if (r.status !== 'ok') {
    out.reason = r.reason;
    if (r.response) {
      out.httpStatus = r.response.status;
      // The body may have been read by the audit already.
      out.body = await r.response.text().catch(() => '(read by the audit)');
      out.body = out.body.slice(0, 500);
    }
  }
  results.push(out);
}
process.stdout.write(JSON.stringify(results) + '\n');
