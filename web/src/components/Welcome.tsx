import { useApolloClient } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import { describeError } from '../lib/errors';
import { createSession } from '../lib/sessions';
import { addMessage } from '../lib/useChat';
import { openChat } from '../lib/route';
import { Composer } from './Composer';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

const EXAMPLES = [
  { text: 'Hello! What can you do?', label: 'Say hello' },
  { text: '/ask What should I cook tonight?', label: 'Let the agent ask you something' },
  { text: '/slow 30', label: 'Watch a long reply stream' },
];

/** The start page: the first message creates a chat. */
export function Welcome({ bar }: { bar: TopBarProps }) {
  const client = useApolloClient();
  const [problem, setProblem] = useState<string | null>(null);

  useEffect(() => {
    document.title = 'talkgraph';
  }, []);

  async function start(content: string) {
    // The server names an untitled chat after its first message.
    const id = await createSession(client);
    await addMessage(client, id, content);
    openChat(id);
  }

  return (
    <>
      <TopBar bar={bar} title="New chat" />
      <div className="welcome">
        <div className="welcome-inner">
          <h2 className="welcome-title">What would you like to talk about?</h2>
          <p className="welcome-sub">
            Start typing below, or try one of these with the built-in demo agent.
          </p>
          <ul className="examples">
            {EXAMPLES.map((ex) => (
              <li key={ex.text}>
                <button type="button" className="example" onClick={() => start(ex.text).catch((e) => setProblem(describeError(e)))}
                >
                  <span className="example-label">{ex.label}</span>
                  <code>{ex.text}</code>
                </button>
              </li>
            ))}
          </ul>
          {problem && (
            <p className="notice error" role="alert">
              {problem}
            </p>
          )}
        </div>
      </div>
      <div className="dock">
        <Composer onSend={start} placeholder="Start a new chat…" autoFocus />
      </div>
    </>
  );
}
