import 'graphiql/setup-workers/vite';
import 'graphiql/style.css';
import './playground.css';
import { createRoot } from 'react-dom/client';
import { Playground } from './Playground';

createRoot(document.getElementById('playground')!).render(<Playground />);
