import { useMutation, useQuery } from '@apollo/client/react';
import { useEffect, useRef, useState, type FormEvent } from 'react';
import {
  AgentsDocument,
  SessionBudgetDocument,
  UpdateTalkSessionSettingsDocument,
  type SettingsFieldsFragment,
  type ToolPolicyKind,
} from '../gql/graphql';
import { describeError } from '../lib/errors';
import { BUSY_POLICIES } from '../lib/policies';

const POLICIES = BUSY_POLICIES;

/** The policies from loosest to strictest. */
const STRICTNESS: Record<ToolPolicyKind, number> = { ALLOW: 0, ASK: 1, DENY: 2 };

const TOOL_POLICIES: { value: ToolPolicyKind; label: string }[] = [
  { value: 'ALLOW', label: 'Allow: runs at once' },
  { value: 'ASK', label: 'Ask me first' },
  { value: 'DENY', label: 'Deny: never runs' },
];

/**
 * Per-chat settings: agent, model, system prompt, temperature, the busy policy and the
 * policy of each of the agent's tools. Render it to open it.
 */
export function SettingsDialog({
  sessionId,
  settings,
  onClose,
}: {
  sessionId: string;
  settings: SettingsFieldsFragment;
  onClose: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const agents = useQuery(AgentsDocument, { fetchPolicy: 'cache-first' });
  const [save, { loading }] = useMutation(UpdateTalkSessionSettingsDocument);
  const budget = useQuery(SessionBudgetDocument, { variables: { id: sessionId }, fetchPolicy: 'network-only' });
  const [form, setForm] = useState(() => toForm(settings));
  const [error, setError] = useState<string | null>(null);

  // Mounted when opened: the form starts from the settings of that moment, and live
  // updates do not overwrite edits in progress.
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setError(null);
    const temperature = form.temperature.trim() === '' ? null : Number(form.temperature);
    if (temperature !== null && (Number.isNaN(temperature) || temperature < 0 || temperature > 2)) {
      setError('Temperature must be a number from 0 to 2.');
      return;
    }
    // Empty: no cap (0 removes one that was set).
    const tokenBudget = form.tokenBudget.trim() === '' ? 0 : Number(form.tokenBudget);
    if (!Number.isInteger(tokenBudget) || tokenBudget < 0) {
      setError('The token budget must be a whole number of tokens, or empty for none.');
      return;
    }
    // Only the tools whose policy changed are sent; the others keep theirs.
    const toolPolicies = agentTools
      .filter((t) => form.policies[t.name] && form.policies[t.name] !== effectivePolicy(t.name))
      .map((t) => ({ tool: t.name, policy: form.policies[t.name] }));
    try {
      // The answer normalises into the cached session: the chat shows the new settings.
      await save({
        variables: {
          input: {
            id: sessionId,
            settings: {
              agent: form.agent,
              model: form.model.trim(),
              systemPrompt: form.systemPrompt,
              ...(temperature !== null ? { temperature } : {}),
              busyPolicy: form.busyPolicy,
              ...(toolPolicies.length > 0 ? { toolPolicies } : {}),
              ...(tokenBudget !== (settings.tokenBudget ?? 0) ? { tokenBudget } : {}),
            },
          },
        },
      });
      onClose();
    } catch (err) {
      setError(describeError(err));
    }
  }

  const agentList = agents.data?.agents ?? [];
  const knownAgent = agentList.some((a) => a.name === form.agent);
  const agentHelp = agentList.find((a) => a.name === form.agent)?.description;
  // The chosen agent's tools (ask_user, the asking itself, has no policy).
  const agentTools = (agentList.find((a) => a.name === form.agent)?.tools ?? []).filter((t) => t.policy != null);
  /** A tool's policy in this chat as it is: the chat's own, else the server's. */
  function effectivePolicy(tool: string): ToolPolicyKind {
    const own = form.agent === settings.agent ? settings.toolPolicies.find((p) => p.tool === tool)?.policy : undefined;
    return own ?? agentTools.find((t) => t.name === tool)?.policy ?? 'ALLOW';
  }
  /** The loosest policy this chat may set for a tool: the server's word. */
  function ceiling(tool: string): ToolPolicyKind {
    const own = form.agent === settings.agent ? settings.toolPolicies.find((p) => p.tool === tool)?.ceiling : undefined;
    return own ?? agentTools.find((t) => t.name === tool)?.policy ?? 'ALLOW';
  }

  return (
    <dialog
      ref={ref}
      className="dialog settings"
      aria-labelledby="settings-title"
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
    >
      <form onSubmit={submit}>
        <h2 id="settings-title">Chat settings</h2>

        <div className="field">
          <label htmlFor="settings-agent">Agent</label>
          <select
            id="settings-agent"
            value={form.agent}
            onChange={(e) => setForm({ ...form, agent: e.target.value })}
            aria-describedby="settings-agent-help"
          >
            {!knownAgent && <option value={form.agent}>{form.agent}</option>}
            {agentList.map((a) => (
              <option key={a.name} value={a.name}>
                {a.name}
              </option>
            ))}
          </select>
          <p className="help" id="settings-agent-help">
            {agents.loading ? 'Loading agents…' : agentHelp || ' '}
          </p>
        </div>

        <div className="field">
          <label htmlFor="settings-model">Model</label>
          <input
            id="settings-model"
            value={form.model}
            placeholder="The agent's default"
            autoComplete="off"
            onChange={(e) => setForm({ ...form, model: e.target.value })}
          />
        </div>

        <div className="field">
          <label htmlFor="settings-prompt">System prompt</label>
          <textarea
            id="settings-prompt"
            rows={4}
            value={form.systemPrompt}
            placeholder="Instructions the agent follows in this chat"
            onChange={(e) => setForm({ ...form, systemPrompt: e.target.value })}
          />
        </div>

        <div className="field">
          <label htmlFor="settings-temperature">Temperature</label>
          <input
            id="settings-temperature"
            type="number"
            inputMode="decimal"
            min={0}
            max={2}
            step={0.1}
            value={form.temperature}
            placeholder="Default"
            onChange={(e) => setForm({ ...form, temperature: e.target.value })}
          />
        </div>

        <div className="field">
          <label htmlFor="settings-budget">Token budget</label>
          <input
            id="settings-budget"
            type="number"
            inputMode="numeric"
            min={0}
            step={1}
            value={form.tokenBudget}
            placeholder="No limit"
            aria-describedby="settings-budget-help"
            onChange={(e) => setForm({ ...form, tokenBudget: e.target.value })}
          />
          <p className="help" id="settings-budget-help">
            {budget.data?.session
              ? `Used so far: ${(budget.data.session.usage.inputTokens + budget.data.session.usage.outputTokens).toLocaleString()} tokens (${budget.data.session.usage.inputTokens.toLocaleString()} read, ${budget.data.session.usage.outputTokens.toLocaleString()} written). `
              : ''}
            Once the chat has used this many tokens, the agent pauses before its next step until you raise it.
          </p>
        </div>

        <fieldset className="field policies">
          <legend>When you send a message while the agent is working</legend>
          {POLICIES.map((p) => (
            <label key={p.value} className="radio">
              <input
                type="radio"
                name="busyPolicy"
                value={p.value}
                checked={form.busyPolicy === p.value}
                onChange={() => setForm({ ...form, busyPolicy: p.value })}
              />
              <span>
                <strong>{p.label}</strong>
                <span className="help">{p.help}</span>
              </span>
            </label>
          ))}
        </fieldset>

        {agentTools.length > 0 && (
          <fieldset className="field tool-policies">
            <legend>Tools</legend>
            <p className="help">What happens when the agent wants to use each tool.</p>
            {agentTools.map((t) => {
              const id = `settings-tool-${t.name}`;
              return (
                <div key={t.name} className="tool-policy">
                  <label htmlFor={id}>
                    <code>{t.name}</code>
                    <span className="help" id={`${id}-help`}>
                      {t.description}
                    </span>
                  </label>
                  <select
                    id={id}
                    aria-describedby={`${id}-help`}
                    value={form.policies[t.name] ?? effectivePolicy(t.name)}
                    onChange={(e) => setForm({ ...form, policies: { ...form.policies, [t.name]: e.target.value as ToolPolicyKind } })}
                  >
                    {TOOL_POLICIES.map((p) => {
                      // A chat may make a tool stricter than the server allows, never looser.
                      const looser = STRICTNESS[p.value] < STRICTNESS[ceiling(t.name)];
                      return (
                        <option key={p.value} value={p.value} disabled={looser}>
                          {looser ? `${p.label} (not allowed on this server)` : p.label}
                        </option>
                      );
                    })}
                  </select>
                </div>
              );
            })}
          </fieldset>
        )}

        {error && (
          <p className="form-error" role="alert">
            {error}
          </p>
        )}
        <div className="dialog-actions">
          <button type="button" className="btn" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" className="btn primary" disabled={loading}>
            {loading ? 'Saving…' : 'Save'}
          </button>
        </div>
      </form>
    </dialog>
  );
}

function toForm(s: SettingsFieldsFragment) {
  return {
    agent: s.agent,
    model: s.model ?? '',
    systemPrompt: s.systemPrompt ?? '',
    temperature: s.temperature == null ? '' : String(s.temperature),
    busyPolicy: s.busyPolicy,
    tokenBudget: s.tokenBudget == null ? '' : String(s.tokenBudget),
    // Tools whose policy the person picked here; the others show their current one.
    policies: {} as Record<string, ToolPolicyKind>,
  };
}
