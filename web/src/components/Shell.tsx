import { useCallback, useEffect, useState } from 'react';
import { useConnectionState } from '../lib/connection';
import { useSchedulesRoute, useSessionRoute, useWebhooksRoute } from '../lib/route';
import { ChatView } from './ChatView';
import { SchedulesPage } from './SchedulesPage';
import { Sidebar } from './Sidebar';
import { WebhooksPage } from './WebhooksPage';
import { Welcome } from './Welcome';

export interface TopBarProps {
  onMenu: () => void;
  menuOpen: boolean;
}

/** The page: the chat list beside the open chat (behind a menu button on narrow screens). */
export function Shell() {
  const sessionId = useSessionRoute();
  const schedules = useSchedulesRoute();
  const webhooks = useWebhooksRoute();
  // The drawer (narrow screens) remembers the chat it was opened on: choosing another
  // chat closes it.
  const [openedOn, setOpenedOn] = useState<{ route: string | null } | null>(null);
  const menuOpen = openedOn !== null && openedOn.route === sessionId;
  const setMenuOpen = useCallback((open: boolean) => setOpenedOn(open ? { route: sessionId } : null), [sessionId]);
  const connection = useConnectionState();

  const closeMenu = useCallback(() => setMenuOpen(false), [setMenuOpen]);
  const toggleMenu = useCallback(() => setMenuOpen(!menuOpen), [setMenuOpen, menuOpen]);

  useEffect(() => {
    if (!menuOpen) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') {
        setMenuOpen(false);
        document.getElementById('menu-button')?.focus();
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [menuOpen, setMenuOpen]);

  const bar: TopBarProps = { onMenu: toggleMenu, menuOpen };

  return (
    <div className={`app${menuOpen ? ' menu-open' : ''}`}>
      <a
        className="skip-link"
        href={schedules && !sessionId ? '#main' : '#composer-input'}
        onClick={(e) => {
          // The address holds the route: move focus without changing it.
          e.preventDefault();
          document.getElementById(schedules && !sessionId ? 'main' : 'composer-input')?.focus();
        }}
      >
        {schedules && !sessionId ? 'Skip to content' : 'Skip to message box'}
      </a>
      <Sidebar currentId={sessionId} open={menuOpen} onClose={closeMenu} />
      {menuOpen && <div className="scrim" aria-hidden="true" onClick={closeMenu} />}
      <main className="main" id="main" tabIndex={-1}>
        {sessionId ? (
          <ChatView key={sessionId} sessionId={sessionId} bar={bar} />
        ) : schedules ? (
          <SchedulesPage bar={bar} />
        ) : webhooks ? (
          <WebhooksPage bar={bar} />
        ) : (
          <Welcome bar={bar} />
        )}
      </main>
      {connection === 'reconnecting' && (
        <div className="connection-banner" role="status">
          <span className="spinner" aria-hidden="true" /> Connection lost. Reconnecting…
        </div>
      )}
    </div>
  );
}
