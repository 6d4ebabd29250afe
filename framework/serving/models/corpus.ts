/**
 * The text the project's own tiny model is fitted on: plain sentences written for this repository
 * (no third-party text), one paragraph per line. Each paragraph ends where the model learns to end
 * a reply (its end-of-text token follows the paragraph's last sentence).
 */
export const CORPUS = `
The town sits by the sea, and the boats come home in the evening. The harbor is quiet in the morning, and the water is calm. A small train runs along the coast, and people wave from the windows. The old baker opens his shop before the sun comes up.
The baker makes bread for the whole town. He works in a warm room with a big oven. His daughter helps him in the morning, and she sells the bread at the front of the shop. People buy bread, cake and tea, and they talk about the weather.
The weather changes fast by the sea. In the morning the sky is blue, and in the afternoon the wind brings rain. The fishermen look at the clouds before they go out. When the wind is strong, the boats stay in the harbor, and the men fix their nets.
A black cat lives near the harbor. The cat sleeps on the warm stones in the afternoon, and at night it walks along the boats. The fishermen give the cat a small fish when they come home. The children call the cat the captain, because it watches every boat.
The river comes down from the hills and meets the sea near the town. In the spring the river is wide and fast. In the summer it is slow, and the children play in the shallow water. An old bridge crosses the river, and the train goes over the bridge every hour.
The school is on the hill above the town. The children walk up the hill in the morning, and they walk down in the afternoon. The teacher tells them about the sea, the stars and the history of the town. She says that the town is older than the bridge and older than the train.
In the evening the lights come on in the houses. People cook dinner, and the smell of fish and bread fills the street. The old men sit in front of the shop and talk about the boats. The young people walk along the harbor and look at the sea.
The library is a small house near the river. It has many old books about ships, maps and stars. A quiet man keeps the library, and he knows every book on the shelves. The children come to read after school, and he helps them find the right book.
The market opens on the first day of the week. Farmers come down from the hills with fruit, milk and cheese. The fishermen sell fish from the morning boats. The market is loud and busy, and the town is happy on market day.
In the winter the days are short and the nights are long. Snow falls on the hills, but the town by the sea stays green. The harbor is cold, and the boats go out less often. People stay at home, read books and drink hot tea by the fire.
A new ship came to the harbor one day. It was larger than the fishing boats, and it had white sails. The children ran down to the water to see it. The captain of the ship told them about the cities across the sea, and they listened until the evening.
The doctor lives in a yellow house near the school. She walks through the town every day and asks people how they feel. When a child is sick, she comes to the house with her small bag. The town trusts her, and the old people say that she is kind and wise.
At night the sky over the sea is full of stars. The fishermen know the stars, and they use them to find the way home. The teacher takes the children to the hill on clear nights, and they count the stars together. The light from the harbor is small under the big dark sky.
The train station is at the end of the main street. Every morning people wait for the first train to the city. The station master rings a bell when the train comes. Some people go to work in the city, and they come back in the evening with news and letters.
The garden behind the library is full of flowers in the summer. Bees fly from flower to flower, and birds sing in the trees. The quiet man waters the garden in the morning. People sit on the bench in the garden and read their books in the sun.
When the storm came, the sea was gray and wild. The wind shook the windows, and the rain hit the roofs. The fishermen pulled the boats high on the beach. In the morning the storm was gone, the sky was clear, and the town went back to work.
`;
