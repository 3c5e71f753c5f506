// Independent validator for the end-to-end tests: node ajv_validate.cjs REQUEST.json ANSWER.json
// REQUEST: [{"schema": {...}, "instances": ["json text", ...]}]; ANSWER: [[true|false|"parse error"]].
// Formats (date, uuid, ...) are checked by ajv-formats-like regexes below, since ajv itself only
// annotates them. bench/grammar_exactness.cjs require()s makeAjv, so both judge formats alike.
const fs = require('fs');
const path = require('path');
const Ajv = require(require.resolve('ajv', { paths: [path.join(__dirname, '../node')] }));

const formats = {
  date: /^\d{4}-\d{2}-\d{2}$/,
  time: /^\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i,
  'date-time': /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i,
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
  byte: /^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/,
};
const dateValid = (s) => {
  const d = new Date(s.slice(0, 10) + 'T00:00:00Z');
  return !isNaN(d) && d.toISOString().slice(0, 10) === s.slice(0, 10);
};

// options: extra Ajv constructor options (e.g. { logger: false }).
function makeAjv(options = {}) {
  const ajv = new Ajv({ strict: false, allErrors: false, ...options });
  for (const [name, re] of Object.entries(formats)) {
    ajv.addFormat(name, { validate: (s) => re.test(s) && (name.startsWith('date') ? dateValid(s) : true) });
  }
  return ajv;
}

function main() {
  const [requestPath, answerPath] = process.argv.slice(2);
  const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  const ajv = makeAjv();
  const answer = request.map(({ schema, instances }) => {
    const validate = ajv.compile(schema);
    return instances.map((text) => {
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        return 'parse error';
      }
      return validate(value);
    });
  });
  fs.writeFileSync(answerPath, JSON.stringify(answer));
}

module.exports = { makeAjv };
if (require.main === module) main();
