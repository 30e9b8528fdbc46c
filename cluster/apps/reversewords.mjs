// The application ReverseWordsApp deploys (seed 004's reversewords service), served on :8080:
//   POST /  {"word":"PALC"}  →  {"reverse_word":"CLAP"}
//   GET /health              →  200 "healthy"
//   GET /release             →  the release it runs ($RELEASE)
// Plain Node, no dependencies: it is packed into the image kfn.local/reversewords by
// `kfn cluster up` (cluster/images.ts) and runs on the node image. It is a workload of the local
// cluster, like nginx and redis, not part of the function that deploys it.
import { createServer } from 'node:http';

const release = process.env.RELEASE ?? 'latest';

const server = createServer((req, res) => {
  const send = (status, body, type = 'application/json') => {
    res.writeHead(status, { 'content-type': type });
    res.end(type === 'application/json' ? `${JSON.stringify(body)}\n` : `${body}\n`);
  };
  if (req.method === 'GET' && req.url === '/health') return send(200, 'healthy', 'text/plain');
  if (req.method === 'GET' && req.url === '/release') return send(200, { release });
  if (req.method !== 'POST' || req.url !== '/') return send(404, { error: 'POST / with {"word": "..."}' });
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (chunk) => {
    body += chunk;
    if (body.length > 65536) req.destroy();
  });
  req.on('end', () => {
    let word;
    try {
      word = JSON.parse(body).word;
    } catch {
      return send(400, { error: 'the body is not JSON' });
    }
    if (typeof word !== 'string') return send(400, { error: 'the body needs a string field "word"' });
    send(200, { reverse_word: [...word].reverse().join('') });
  });
});

server.listen(Number(process.env.PORT ?? 8080), () => console.log(`reversewords ${release} listening on :${server.address().port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
